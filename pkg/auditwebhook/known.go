package auditwebhook

import (
	"crypto/sha256"
	"time"

	"github.com/carousel-dev/carousel/pkg/oldca"
)

// knownSightings is what a Cluster's usage record held when a replica last
// read or wrote it: each credential's first and last sighting, by a digest
// of its user and fingerprint, and what it says of the credentials it has no
// room for. It is a fifth of the record's size, and lets a batch that would
// only defer small advances of lastSeen or earlier firstSeens (most batches
// of a busy cluster), or show credentials a full record leaves out, skip
// reading the record, which the manager's cache does not hold.
type knownSightings struct {
	byID map[credentialID]sighting
	// room is how many more bytes the record may take (oldca.Usage.Room).
	room int
	// unrecorded is the record's Unrecorded in Unix nanoseconds, if it has one.
	unrecorded    int64
	hasUnrecorded bool
}

// credentialID digests a credential's user and fingerprint.
type credentialID [16]byte

// sighting is a credential's first and last sighting, in Unix nanoseconds.
type sighting struct{ first, last int64 }

func idOf(c oldca.Credential) credentialID {
	sum := sha256.Sum256([]byte(c.User + "\x00" + c.Fingerprint))
	return credentialID(sum[:16])
}

// knownFrom is what u holds.
func knownFrom(u *oldca.Usage) *knownSightings {
	known := &knownSightings{byID: make(map[credentialID]sighting, len(u.Credentials)), room: u.Room()}
	for _, c := range u.Credentials {
		known.byID[idOf(c)] = sighting{first: c.FirstSeen.UnixNano(), last: c.LastSeen.UnixNano()}
	}
	if u.Unrecorded != nil {
		known.unrecorded, known.hasUnrecorded = u.Unrecorded.UnixNano(), true
	}
	return known
}

// deferred reports whether oldca.Usage.Observe, given seen and resolution,
// would surely change nothing in a record that holds what k holds, and at
// most defer sightings: every credential of seen is known, and seen last
// less than resolution after its known lastSeen (seen first earlier or not);
// or not known, with no room for it in the record, and seen last no later
// than the record's Unrecorded (a full record in constant use is then read
// and written once a minute, not for each batch). If so, it returns what
// Observe would defer: the sightings that move a known first sighting back
// or last sighting on. A nil k knows nothing.
func (k *knownSightings) deferred(seen []oldca.Credential, resolution time.Duration) (moves []oldca.Credential, ok bool) {
	if k == nil {
		return nil, false
	}
	for _, c := range seen {
		s, known := k.byID[idOf(c)]
		first, last := c.FirstSeen.UnixNano(), c.LastSeen.UnixNano()
		if !known {
			if oldca.EntryBytes(c) <= k.room || !k.hasUnrecorded || last > k.unrecorded {
				return nil, false
			}
			continue
		}
		if last-s.last >= resolution.Nanoseconds() {
			return nil, false
		}
		if first < s.first || last > s.last {
			moves = append(moves, c)
		}
	}
	return moves, true
}

// holds reports whether a record that holds what k holds already holds
// what waits: every credential of p is known, first seen no earlier and last
// seen no later than k knows, so that oldca.Usage.Observe with no resolution
// would change nothing. A nil k knows nothing.
func (k *knownSightings) holds(p pendingSightings) bool {
	if k == nil {
		return false
	}
	for id, s := range p {
		known, ok := k.byID[id]
		if !ok || s.first < known.first || s.last > known.last {
			return false
		}
	}
	return true
}
