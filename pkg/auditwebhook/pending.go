package auditwebhook

import (
	"time"

	"github.com/carousel-dev/carousel/pkg/oldca"
)

// pendingSightings are the sightings of a Cluster that wait for its next
// write of the record: for each credential, by its digest, the earliest first
// and the latest last sighting of the batches since that write. A managed API
// server sends up to ten batches a second, most of them the same clients a
// few seconds later, so a list of every batch's sightings would grow with the
// batches for the minute they wait; folded, it is bounded by the clients in
// use, at the size of the known sightings.
//
// Only sightings of credentials the record holds wait (what Observe defers,
// or what the known sightings say it would), so the record names each of
// them when they are written; one it no longer names (a record started over,
// or deleted, meanwhile) is lost, and the record says until when it lost
// sightings (oldca.Usage.LeaveOut). The record's write of them is the one of
// each batch's sightings in turn: with no resolution, Observe keeps, of a
// credential's sightings, the earliest first and the latest last
// (FuzzPendingSightingsWriteWhatEachBatchWould).
type pendingSightings map[credentialID]sighting

// add folds seen in.
func (p *pendingSightings) add(seen []oldca.Credential) {
	if len(seen) == 0 {
		return
	}
	if *p == nil {
		*p = make(pendingSightings, len(seen))
	}
	for _, c := range seen {
		id, s := idOf(c), sighting{first: c.FirstSeen.UnixNano(), last: c.LastSeen.UnixNano()}
		if had, ok := (*p)[id]; ok {
			s = sighting{first: min(s.first, had.first), last: max(s.last, had.last)}
		}
		(*p)[id] = s
	}
}

// in is what waits as sightings of the credentials u holds, in u's order,
// and the latest last sighting of those u does not hold (zero when it holds
// them all).
func (p pendingSightings) in(u *oldca.Usage) (seen []oldca.Credential, lost time.Time) {
	held := make(map[credentialID]bool, len(p))
	for _, c := range u.Credentials {
		id := idOf(c)
		s, ok := p[id]
		if !ok || held[id] { // a record edited by hand may name one twice
			continue
		}
		held[id] = true
		seen = append(seen, oldca.Credential{User: c.User, Fingerprint: c.Fingerprint,
			FirstSeen: time.Unix(0, s.first).UTC(), LastSeen: time.Unix(0, s.last).UTC()})
	}
	for id, s := range p {
		if !held[id] && (lost.IsZero() || s.last > lost.UnixNano()) {
			lost = time.Unix(0, s.last).UTC()
		}
	}
	return seen, lost
}
