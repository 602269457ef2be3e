package auditwebhook

import (
	"fmt"
	"testing"
	"time"

	"github.com/carousel-dev/carousel/pkg/oldca"
)

// FuzzKnownSightingsDeferOnlyWhatObserveDefers checks the promises a batch
// skipped without reading the record rests on: when knownFrom(u) says a
// batch only defers, Observe on u changes nothing (and so defers every
// sighting it moves); when it says u holds the batch, Observe with no
// resolution (a flush's) changes nothing either. A sighting of a credential
// u holds that moves its last sighting on by less than the resolution is
// deferred however far back it moves its first: its sender, who chooses the
// times, cannot have the record written for each batch.
func FuzzKnownSightingsDeferOnlyWhatObserveDefers(f *testing.F) {
	f.Add(false, int64(0), int64(10), int64(0), int64(20), false, int64(0))  // an advance of 10 s: deferred
	f.Add(false, int64(0), int64(10), int64(0), int64(70), false, int64(0))  // of a minute: a change
	f.Add(false, int64(0), int64(10), int64(-1), int64(10), false, int64(0)) // first seen earlier: deferred
	f.Add(true, int64(0), int64(10), int64(0), int64(10), false, int64(0))   // another client: a change
	f.Add(false, int64(0), int64(10), int64(5), int64(5), false, int64(0))   // nothing new
	f.Add(false, int64(0), int64(0), int64(0), int64(oldca.Resolution/time.Second)-1, false, int64(0))
	f.Add(true, int64(0), int64(10), int64(0), int64(10), true, int64(20)) // another client, no room, left out until later: nothing
	f.Add(true, int64(0), int64(10), int64(0), int64(30), true, int64(20)) // left out until earlier: a change
	f.Fuzz(func(t *testing.T, otherClient bool, first, last, seenFirst, seenLast int64, full bool, unrecorded int64) {
		const bound = int64(48 * time.Hour / time.Second)
		for _, v := range []int64{first, last, seenFirst, seenLast, unrecorded} {
			if v < -bound || v > bound {
				t.Skip()
			}
		}
		at := func(s int64) time.Time { return t0.Add(time.Duration(s) * time.Second) }
		recorded := oldca.Credential{User: "ci", Fingerprint: fp("cc"), FirstSeen: at(first), LastSeen: at(max(first, last))}
		seen := oldca.Credential{User: "ci", Fingerprint: fp("cc"), FirstSeen: at(seenFirst), LastSeen: at(max(seenFirst, seenLast))}
		if otherClient {
			seen.User = "deploy"
		}
		// Observed when the last sighting arrived: nothing in the record ages out.
		now := recorded.LastSeen
		if seen.LastSeen.After(now) {
			now = seen.LastSeen
		}
		if now.Sub(recorded.LastSeen) >= oldca.Retention {
			t.Skip()
		}
		record := func() *oldca.Usage {
			u := &oldca.Usage{Credentials: []oldca.Credential{recorded}}
			if full {
				// Clients of shorter names than the batch's fill it: no room for it.
				var fillers []oldca.Credential
				for i := 0; len(fillers)*oldca.EntryBytes(recorded) < 2*oldca.MaxUsageBytes; i++ {
					fillers = append(fillers, oldca.Credential{User: fmt.Sprintf("f%04d", i), Fingerprint: fp("ff"), FirstSeen: recorded.FirstSeen, LastSeen: recorded.LastSeen})
				}
				u.Observe(fillers, now, 0)
				until := at(unrecorded)
				u.Unrecorded = &until
			}
			return u
		}
		u := record()
		known := knownFrom(u)
		var waiting pendingSightings
		waiting.add([]oldca.Credential{seen})
		moves, defers := known.deferred([]oldca.Credential{seen}, oldca.Resolution)
		holds := known.holds(waiting)
		changed, deferred := u.Observe([]oldca.Credential{seen}, now, oldca.Resolution)
		if defers && changed {
			t.Errorf("the known sightings defer %+v, which changes the record of %+v", seen, recorded)
		}
		if defers && !changed && len(moves) != len(deferred) {
			t.Errorf("the known sightings defer %+v of %+v, Observe %+v", moves, seen, deferred)
		}
		if !otherClient && seen.LastSeen.Sub(recorded.LastSeen) < oldca.Resolution && (!defers || changed) {
			t.Errorf("a sighting %+v of the recorded %+v is not deferred (known: %t, Observe: changed %t)", seen, recorded, defers, changed)
		}
		u = record()
		if changed, _ := u.Observe([]oldca.Credential{seen}, now, 0); holds && changed {
			t.Errorf("the known sightings hold %+v, which a flush writes into the record of %+v", seen, recorded)
		}
	})
}

func TestKnownSightingsOfNothing(t *testing.T) {
	var none *knownSightings
	seen := []oldca.Credential{{User: "ci", Fingerprint: fp("cc"), FirstSeen: t0, LastSeen: t0}}
	var waiting pendingSightings
	waiting.add(seen)
	if _, defers := none.deferred(seen, oldca.Resolution); defers || none.holds(waiting) {
		t.Error("sightings never read defer or hold a batch")
	}
}
