package auditwebhook

import (
	"cmp"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/carousel-dev/carousel/pkg/oldca"
)

// FuzzPendingSightingsWriteWhatEachBatchWould: the record a flush writes
// from the folded sightings of the credentials it holds is the one it would
// write from every batch's sightings (Observe with no resolution applies
// each in turn), and a sighting of one it does not hold (lost meanwhile)
// leaves it saying so, until the sighting's last time at least.
// Each three bytes of sightings are a sighting: which of four clients, and
// its first and last second; the record holds the first three from
// recordedFirst to recordedLast.
func FuzzPendingSightingsWriteWhatEachBatchWould(f *testing.F) {
	f.Add(int8(0), int8(10), []byte{0, 12, 20, 0, 5, 30, 1, 0, 0, 1, 3, 2})
	f.Add(int8(0), int8(0), []byte{})
	f.Add(int8(-5), int8(50), []byte{2, 60, 70, 2, 50, 55, 3, 127, 127, 0, 128, 1})
	f.Add(int8(0), int8(10), []byte{3, 5, 9, 3, 1, 2, 0, 11, 12})
	f.Fuzz(func(t *testing.T, recordedFirst, recordedLast int8, sightings []byte) {
		at := func(b int8) time.Time { return t0.Add(time.Duration(b) * time.Second) }
		// A sighting's last is never before its first.
		span := func(first, last int8) (time.Time, time.Time) { return at(first), at(max(first, last)) }
		client := func(b byte) (string, string) {
			i := b % 4
			return fmt.Sprintf("u%d", i%3), fp(fmt.Sprintf("%02x", i)) // two fingerprints of u0
		}
		first, last := span(recordedFirst, recordedLast)
		record := func() *oldca.Usage {
			u := &oldca.Usage{}
			for i := range byte(3) {
				user, fingerprint := client(i)
				u.Credentials = append(u.Credentials, oldca.Credential{User: user, Fingerprint: fingerprint, FirstSeen: first, LastSeen: last})
			}
			slices.SortFunc(u.Credentials, func(a, b oldca.Credential) int {
				return cmp.Or(strings.Compare(a.User, b.User), strings.Compare(a.Fingerprint, b.Fingerprint))
			})
			return u
		}
		now := at(127)
		var held []oldca.Credential
		var pending pendingSightings
		var lastLost time.Time
		for i := 0; i+2 < len(sightings); i += 3 {
			user, fingerprint := client(sightings[i])
			first, last := span(int8(sightings[i+1]), int8(sightings[i+2]))
			s := oldca.Credential{User: user, Fingerprint: fingerprint, FirstSeen: first, LastSeen: last}
			pending.add([]oldca.Credential{s})
			if sightings[i]%4 == 3 {
				lastLost = latest(lastLost, last)
				continue
			}
			held = append(held, s)
		}
		each, folded := record(), record()
		each.Observe(held, now, 0)
		seen, lost := pending.in(folded)
		folded.Observe(seen, now, 0)
		if !lost.IsZero() {
			folded.LeaveOut(lost, now, 0)
		}
		if !reflect.DeepEqual(each.Credentials, folded.Credentials) {
			t.Fatalf("from each sighting: %+v; from the folded ones: %+v", each.Credentials, folded.Credentials)
		}
		switch {
		case lastLost.IsZero() && folded.Unrecorded != nil:
			t.Fatalf("nothing lost, and the record says it lost sightings until %v", folded.Unrecorded)
		case !lastLost.IsZero() && (folded.Unrecorded == nil || folded.Unrecorded.Before(earliest(lastLost, now))):
			t.Fatalf("a sighting until %v lost, and the record says it lost sightings until %v", lastLost, folded.Unrecorded)
		}
	})
}

// TestTheReceiverLeavesNothingWaitingForABatchSentAgain: a batch sent again
// (kube-apiserver's webhook backend sends one again after a failure) that
// moves nothing on leaves nothing waiting.
func TestTheReceiverLeavesNothingWaitingForABatchSentAgain(t *testing.T) {
	s := newSetup(t)
	first := batch(event("ci", "X509SHA256="+fp("cc"), t0), event("deploy", "X509SHA256="+fp("dd"), t0))
	for _, body := range [][]byte{first, batch(event("ci", "X509SHA256="+fp("cc"), t0.Add(10*time.Second))), first} {
		if w := s.post(body); w.Code != http.StatusOK {
			t.Fatalf("answered %d %q", w.Code, w.Body.String())
		}
	}
	if n := s.waiting(); n != 1 {
		t.Errorf("%d sightings wait, want ci's alone", n)
	}
}

// TestPendingSightingsInARecordThatNamesOneTwice: a record edited by hand
// may name a credential twice; a waiting sighting of one it does not name
// is still lost, not taken for written.
func TestPendingSightingsInARecordThatNamesOneTwice(t *testing.T) {
	ci := oldca.Credential{User: "ci", Fingerprint: fp("cc"), FirstSeen: t0, LastSeen: t0}
	deploy := oldca.Credential{User: "deploy", Fingerprint: fp("dd"), FirstSeen: t0, LastSeen: t0.Add(time.Second)}
	var pending pendingSightings
	pending.add([]oldca.Credential{ci, deploy})
	seen, lost := pending.in(&oldca.Usage{Credentials: []oldca.Credential{ci, ci}})
	if len(seen) != 1 || seen[0].User != "ci" || !lost.Equal(deploy.LastSeen) {
		t.Errorf("in a record of ci twice: %+v, lost until %v; want ci once, and deploy lost until %v", seen, lost, deploy.LastSeen)
	}
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// TestTheReceiverKeepsOneSightingOfAClientForLater: a busy Cluster's
// batches of the same clients, a second apart, leave one sighting of each
// for the write a minute later, the latest.
func TestTheReceiverKeepsOneSightingOfAClientForLater(t *testing.T) {
	s := newSetup(t)
	const clients, batches = 20, 50
	post := func(at time.Duration) {
		t.Helper()
		var events []auditv1.Event
		for i := range clients {
			events = append(events, event(fmt.Sprintf("system:node:worker-%02d", i), "X509SHA256="+fp(fmt.Sprintf("%02x", i)), t0.Add(at)))
		}
		if w := s.post(batch(events...)); w.Code != http.StatusOK {
			t.Fatalf("answered %d %q", w.Code, w.Body.String())
		}
	}
	for i := range batches {
		post(time.Duration(i) * time.Second)
	}
	if n := s.waiting(); n != clients {
		t.Fatalf("%d sightings wait after %d batches of %d clients, want one a client", n, batches, clients)
	}
	s.clock.Step(oldca.Resolution)
	g := gomega.NewWithT(t)
	g.Eventually(s.writes.Load).Should(gomega.BeEquivalentTo(2), "the sightings left for later written a minute later")
	recorded := s.usage(t).Credentials
	if len(recorded) != clients {
		t.Fatalf("%d clients recorded, want %d", len(recorded), clients)
	}
	for _, c := range recorded {
		if want := t0.Add((batches-1)*time.Second + time.Millisecond); !c.LastSeen.Equal(want) || !c.FirstSeen.Equal(t0) {
			t.Errorf("%s recorded from %v to %v, want from %v to %v", c.User, c.FirstSeen, c.LastSeen, t0, want)
		}
	}
}
