package check

import (
	"fmt"
	"math"
	"strconv"

	"github.com/gooutbox/outbox/outboxgen/internal/schema"
)

// constraintIssues lists the FIELD_CONSTRAINT issues of reader field rf
// against writer field wf (name is rf's qualified name): every constraint
// the generated Validate of the reader enforces (min and max of integers,
// max_length and pattern of strings) must accept every value the writer's constraints allow, or the reader rejects
// payloads the writer validated. Narrowed enum values are ENUM_VALUE.
//
// Seen from the newer version, a tightened constraint breaks backward
// compatibility (the newer reader rejects older payloads) and a loosened
// one forward compatibility (older readers reject newer payloads).
// readerNewer tells which of the two rf is, for the message.
func constraintIssues(rf, wf *schema.Field, rv, wv string, readerNewer bool, name string) []issue {
	var out []issue
	add := func(constraint, verb, rval, wval string) {
		oldV, oldL, newV, newL := wval, wv, rval, rv
		if !readerNewer {
			oldV, oldL, newV, newL = rval, rv, wval, wv
		}
		if verb == "" {
			verb = "loosened"
			if readerNewer {
				verb = "tightened"
			}
		}
		hint := "; keep the constraint, or mark the version breaking: true and write the upcaster that makes older values valid"
		if !readerNewer {
			hint = "; keep the constraint, or mark the version breaking: true so that older readers are not declared to read it"
		}
		out = append(out, issue{rule: FieldConstraint, field: rf,
			msg:  fmt.Sprintf("%s of %q %s from %s in %s to %s in %s: %s rejects values %s may write", constraint, name, verb, oldV, oldL, newV, newL, rv, wv),
			hint: hint})
	}
	rk, wk := rf.Type.Kind, wf.Type.Kind
	if rk == schema.Int32 || rk == schema.Int64 {
		// An int32 is bounded by its type where min or max is unset.
		rlo, rloSet := bound(rf.Min, rk, math.MinInt32, math.MinInt64)
		wlo, wloSet := bound(wf.Min, wk, math.MinInt32, math.MinInt64)
		if rloSet && (!wloSet || wlo < rlo) {
			add("min", "", show(rf.Min), show(wf.Min))
		}
		rhi, rhiSet := bound(rf.Max, rk, math.MaxInt32, math.MaxInt64)
		whi, whiSet := bound(wf.Max, wk, math.MaxInt32, math.MaxInt64)
		if rhiSet && (!whiSet || whi > rhi) {
			add("max", "", show(rf.Max), show(wf.Max))
		}
	}
	if rk == schema.String {
		if rf.MaxLength != nil && (wf.MaxLength == nil || *wf.MaxLength > *rf.MaxLength) {
			add("max_length", "", showInt(rf.MaxLength), showInt(wf.MaxLength))
		}
		// Whether one pattern accepts all that another does is not
		// decidable here: any change of a pattern the reader enforces
		// counts, in both directions.
		if rf.Pattern != "" && rf.Pattern != wf.Pattern {
			add("pattern", "changed", strconv.Quote(rf.Pattern), showPattern(wf.Pattern))
		}
	}
	return out
}

// bound returns a min or max constraint as enforced: the value when set,
// else the int32 limit for an int32 (whose decoder rejects the rest), else
// unset. The int64 limit is the same as no bound.
func bound(v *int64, k schema.Kind, limit32, limit64 int64) (int64, bool) {
	switch {
	case v != nil:
		return *v, *v != limit64
	case k == schema.Int32:
		return limit32, true
	}
	return 0, false
}

func show(v *int64) string {
	if v == nil {
		return "none"
	}
	return strconv.FormatInt(*v, 10)
}

func showInt(v *int) string {
	if v == nil {
		return "none"
	}
	return strconv.Itoa(*v)
}

func showPattern(p string) string {
	if p == "" {
		return "none"
	}
	return strconv.Quote(p)
}
