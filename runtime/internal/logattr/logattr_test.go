package logattr_test

import (
	"errors"
	"testing"

	"github.com/gooutbox/outbox/runtime/internal/logattr"
)

func TestError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("plain"), "plain"},
		{errors.Join(errors.New("publish: unknown topic"), errors.New("handler failed")), "publish: unknown topic; handler failed"},
		{errors.New("a\r\n  b\n\nc\n"), "a; b; c"},
	} {
		a := logattr.Error(c.err)
		if a.Key != "error" || a.Value.String() != c.want {
			t.Errorf("Error(%q) = %s=%q, want error=%q", c.err, a.Key, a.Value.String(), c.want)
		}
	}
}
