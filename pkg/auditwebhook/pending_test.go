package auditwebhook

import (
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/onsi/gomega"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/carousel-dev/carousel/pkg/oldca"
)

// FuzzPendingSightingsWriteWhatEachBatchWould: the record written from the
// folded sightings is the one written from every batch's sightings in turn.
// Each three bytes of sightings are a sighting: which of four clients, and
// its first and last second; the record holds the first client from
// recordedFirst to recordedLast.
func FuzzPendingSightingsWriteWhatEachBatchWould(f *testing.F) {
	f.Add(int8(0), int8(10), []byte{0, 12, 20, 0, 5, 30, 1, 0, 0, 1, 3, 2})
	f.Add(int8(0), int8(0), []byte{})
	f.Add(int8(-5), int8(50), []byte{2, 60, 70, 2, 50, 55, 3, 127, 127, 0, 128, 1})
	f.Fuzz(func(t *testing.T, recordedFirst, recordedLast int8, sightings []byte) {
		at := func(b int8) time.Time { return t0.Add(time.Duration(b) * time.Second) }
		// A sighting's last is never before its first.
		span := func(first, last int8) (time.Time, time.Time) { return at(first), at(max(first, last)) }
		client := func(b byte) (string, string) {
			i := b % 4
			return fmt.Sprintf("u%d", i%3), fp(fmt.Sprintf("%02x", i)) // two fingerprints of u0
		}
		var seen []oldca.Credential
		for i := 0; i+2 < len(sightings); i += 3 {
			user, fingerprint := client(sightings[i])
			first, last := span(int8(sightings[i+1]), int8(sightings[i+2]))
			seen = append(seen, oldca.Credential{User: user, Fingerprint: fingerprint, FirstSeen: first, LastSeen: last})
		}
		user, fingerprint := client(0)
		first, last := span(recordedFirst, recordedLast)
		record := func() *oldca.Usage {
			return &oldca.Usage{Credentials: []oldca.Credential{{User: user, Fingerprint: fingerprint, FirstSeen: first, LastSeen: last}}}
		}
		now := at(127)
		var pending pendingSightings
		pending.add(seen)
		if len(pending) > 4 {
			t.Fatalf("%d sightings of four clients wait", len(pending))
		}
		each, folded := record(), record()
		changedEach, _ := each.Observe(seen, now, 0)
		changedFolded, _ := folded.Observe(pending.list(), now, 0)
		if changedEach != changedFolded || !reflect.DeepEqual(each, folded) {
			t.Fatalf("from each sighting: %v %+v; from the folded ones: %v %+v", changedEach, each, changedFolded, folded)
		}
	})
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
	waiting := func() int {
		st := s.receiver.lock(client.ObjectKey{Namespace: "team-a", Name: "prod"})
		defer s.receiver.unlock(client.ObjectKey{Namespace: "team-a", Name: "prod"}, st)
		return len(st.pending)
	}
	if n := waiting(); n != clients {
		t.Fatalf("%d sightings wait after %d batches of %d clients, want one a client", n, batches, clients)
	}
	s.clock.Step(oldca.Resolution)
	g := gomega.NewWithT(t)
	g.Eventually(s.writes.Load).Should(gomega.BeEquivalentTo(2), "the sightings left for later written a minute later")
	for _, c := range s.usage(t).Credentials {
		if want := t0.Add((batches-1)*time.Second + time.Millisecond); !c.LastSeen.Equal(want) || !c.FirstSeen.Equal(t0) {
			t.Errorf("%s recorded from %v to %v, want from %v to %v", c.User, c.FirstSeen, c.LastSeen, t0, want)
		}
	}
}
