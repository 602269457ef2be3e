package auditwebhook

import (
	"cmp"
	"slices"
	"strings"

	"github.com/carousel-dev/carousel/pkg/oldca"
)

// pendingSightings are the sightings of a Cluster that wait for its next
// write of the record: for each credential, the earliest first and the
// latest last sighting of the batches since that write. A managed API
// server sends up to ten batches a second, most of them the same clients a
// few seconds later, so a list of every batch's sightings would grow with
// the batches for the minute they wait; folded, it is bounded by the clients
// in use.
//
// The record's write of them is the same either way: with no resolution,
// Observe keeps, of a credential's sightings, the earliest first and the
// latest last (FuzzPendingSightingsWriteWhatEachBatchWould).
type pendingSightings map[pendingKey]oldca.Credential

type pendingKey struct{ user, fingerprint string }

// add folds seen in.
func (p *pendingSightings) add(seen []oldca.Credential) {
	if len(seen) == 0 {
		return
	}
	if *p == nil {
		*p = make(pendingSightings, len(seen))
	}
	for _, s := range seen {
		k := pendingKey{s.User, s.Fingerprint}
		c, ok := (*p)[k]
		if !ok {
			(*p)[k] = s
			continue
		}
		if s.FirstSeen.Before(c.FirstSeen) {
			c.FirstSeen = s.FirstSeen
		}
		if s.LastSeen.After(c.LastSeen) {
			c.LastSeen = s.LastSeen
		}
		(*p)[k] = c
	}
}

// list is what waits, in the record's order.
func (p pendingSightings) list() []oldca.Credential {
	out := make([]oldca.Credential, 0, len(p))
	for _, c := range p {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b oldca.Credential) int {
		return cmp.Or(strings.Compare(a.User, b.User), strings.Compare(a.Fingerprint, b.Fingerprint))
	})
	return out
}
