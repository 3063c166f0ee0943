package check

import (
	"fmt"

	"github.com/gooutbox/outbox/outboxgen/internal/schema"
)

// Against compares f with old, the same schema as it was at rev (a git
// revision or a file name, used in messages), without the lock file: a lock
// file edited together with the schema does not hide a change to what was
// released at rev. It reports, in f:
//
//   - TYPE_NAME_STABLE: an event released at rev has another wire type;
//   - VERSION_FROZEN: an event or version released at rev (not draft: true
//     there) is gone, or a released version changed; a changed version also
//     gets the rule violations between its definition at rev and its
//     current one, in the directions of the event's mode, marked
//     "against <rev>".
//
// Versions that are new since rev are compared with the released ones by
// [Check], which compares every pair within f. Events, versions and types
// of f marked Incomplete (parse errors) are skipped, and so is all of f when
// f itself is marked Incomplete.
func Against(f, old *schema.File, rev string) schema.ErrorList {
	if f.Incomplete {
		return nil
	}
	c := &checker{file: f}
	for _, oev := range old.Events {
		released := false
		for _, v := range oev.Versions {
			released = released || !v.Draft
		}
		if !released || oev.Incomplete {
			continue
		}
		ev := c.eventByType(oev.Type)
		if ev == nil {
			if byName := c.eventByName(oev.Name); byName != nil {
				if !byName.Incomplete {
					c.report(byName.TypePos, byName, nil, TypeNameStable, "", "wire type changed from %q (released at %s) to %q; released events keep their type: revert it, or declare a new event", oev.Type, rev, byName.Type)
				}
				continue
			}
			c.errs = append(c.errs, schema.Error{Path: f.Path, Msg: fmt.Sprintf("%s: %s: event %q was released at %s and is no longer in the schema; keep it so old payloads still decode", oev.Name, VersionFrozen, oev.Type, rev)})
			continue
		}
		if ev.Incomplete {
			continue
		}
		for _, ov := range oev.Versions {
			if ov.Draft || ov.Incomplete {
				continue
			}
			var nv *schema.Version
			for _, x := range ev.Versions {
				if x.Number == ov.Number {
					nv = x
				}
			}
			switch {
			case nv == nil:
				c.report(ev.Pos, ev, nil, VersionFrozen, "", "version v%d was released at %s and is no longer in the schema; keep it so old payloads still decode", ov.Number, rev)
			case nv.Incomplete:
			case nv.Draft:
				c.report(nv.Pos, ev, nv, VersionFrozen, "", "version was released at %s and cannot be a draft again", rev)
			case Fingerprint(ev, nv) != Fingerprint(oev, ov):
				c.report(nv.Pos, ev, nv, VersionFrozen, "", "version was released at %s and has changed since; revert the change and add a new version instead", rev)
				oldLabel := fmt.Sprintf("v%d at %s", ov.Number, rev)
				c.pair(ev, nv, ov, fmt.Sprintf("v%d", nv.Number), oldLabel, ev.Compatibility, ", against "+rev)
				if nv.Breaking != ov.Breaking {
					c.report(nv.Pos, ev, nv, VersionFrozen, "", "breaking: %t at %s, %t now", ov.Breaking, rev, nv.Breaking)
				}
			}
		}
	}
	return c.errs.Sort()
}
