package sqlstore

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestGivingBack: an owner above its share gives back its highest shards
// that no batch in flight holds, and leaves out of its claims the ones it
// must keep for now, so that a later claim can give them back; in the
// background (busy unknown) it gives back nothing.
func TestGivingBack(t *testing.T) {
	busy := func(shards ...int16) *[Shards]bool {
		var b [Shards]bool
		for _, s := range shards {
			b[s] = true
		}
		return &b
	}
	tests := []struct {
		name                   string
		owned                  []int16
		target                 int
		busy                   *[Shards]bool
		kept, surplus, leaving []int16
	}{
		{"nothing in flight", []int16{1, 2, 3, 4}, 2, busy(), []int16{1, 2}, []int16{3, 4}, nil},
		{"highest in flight", []int16{1, 2, 3, 4}, 2, busy(4), []int16{1, 4}, []int16{2, 3}, nil},
		{"all in flight", []int16{1, 2, 3, 4}, 2, busy(1, 2, 3, 4), []int16{1, 2, 3, 4}, nil, []int16{3, 4}},
		{"unknown (background)", []int16{1, 2, 3, 4}, 3, nil, []int16{1, 2, 3, 4}, nil, []int16{4}},
		{"some in flight", []int16{5, 6, 7, 8, 9}, 2, busy(9, 7), []int16{7, 9}, []int16{5, 6, 8}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kept, surplus, leaving := givingBack(tt.owned, tt.target, tt.busy)
			opt := cmpopts.EquateEmpty()
			if diff := cmp.Diff(tt.kept, kept, opt); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.surplus, surplus, opt); diff != "" {
				t.Errorf("given back (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.leaving, leaving, opt); diff != "" {
				t.Errorf("leaving (-want +got):\n%s", diff)
			}
		})
	}
}
