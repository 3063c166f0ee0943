package outboxgenrt

import (
	"strings"

	"github.com/gooutbox/outbox/runtime"
)

// GeneratedCodeVersion2 is referenced by every package outboxgen generates
// (const _ = outboxgenrt.GeneratedCodeVersion2). Generation 1 of the
// contract lived in package runtime (runtime.GeneratedCodeVersion1);
// generation 2 moved the helpers here and made nested validators return
// relative error paths.
const GeneratedCodeVersion2 = true

// InvalidEntry validates every value of m and returns the key and error of
// the smallest key whose value fails, or "" and nil when all pass. Checking
// every entry makes the result independent of map iteration order without
// sorting, so a valid map costs no allocation. The error's Field is the
// path below the value; the caller prefixes the map's path and the key.
func InvalidEntry[V any](m map[string]V, validate func(V) *runtime.FieldError) (string, *runtime.FieldError) {
	var (
		badKey string
		bad    *runtime.FieldError
	)
	for k, v := range m {
		if bad != nil && k >= badKey {
			continue
		}
		if err := validate(v); err != nil {
			badKey, bad = k, err
		}
	}
	return badKey, bad
}

// IsDecimal reports whether s is a decimal string as outbox schemas define
// it: an optional minus sign, digits, and optionally a dot and more digits
// ("12", "-0.50"; not "1e3", ".5", "1." or "+1"). Generated Validate methods
// call it for decimal fields.
func IsDecimal(s string) bool {
	if s != "" && s[0] == '-' {
		s = s[1:]
	}
	digits := func(t string) bool {
		if t == "" {
			return false
		}
		for i := 0; i < len(t); i++ {
			if t[i] < '0' || t[i] > '9' {
				return false
			}
		}
		return true
	}
	whole, frac, dot := strings.Cut(s, ".")
	return digits(whole) && (!dot || digits(frac))
}
