// Package oldca decides who still depends on the old CAs of a Prepared CA
// rotation, the gate that complete-ca-rotation passes: Nodes whose node
// agent reports a client certificate from the old client CA, certificates of
// the Cluster the new client CA did not sign, and the users that the
// managed API server's audit events show authenticating with a client
// certificate the old client CA signed, or can only have signed.
//
// Usage is the record of those audit events: which client certificate
// (user and SHA-256 fingerprint) was seen in use, first and last. It is kept
// in a ConfigMap per Cluster, so that every replica of the manager that
// receives a batch of events, and the one that reconciles the Cluster, share it.
package oldca

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Credential is one client certificate the managed API server saw in use.
type Credential struct {
	User string `json:"user"`
	// Fingerprint is the hex SHA-256 of the certificate's DER, as the API
	// server's credential ID (X509SHA256=…) gives it.
	Fingerprint string    `json:"sha256"`
	FirstSeen   time.Time `json:"firstSeen"`
	LastSeen    time.Time `json:"lastSeen"`
}

// Usage is the record of the client certificates seen in use, sorted by
// user, then fingerprint.
//
// The record never grows past MaxUsageBytes: a full record could not be
// written, and every later sighting would be lost with it. Past it, a
// credential not recorded yet is left out, and Unrecorded says until when
// it left sightings out; the gate does not vouch for a rotation that
// started within Retention of that time (Dependents).
type Usage struct {
	Credentials []Credential `json:"credentials"`
	// Unrecorded is a time no sighting the record left out, or lost when it
	// was started over, is later than; nil when it never left one out.
	Unrecorded *time.Time `json:"unrecorded,omitempty"`
}

// MaxUsageBytes bounds the record's JSON, so that it stays under the 1 MiB
// of a ConfigMap with room to spare: some 3,500 credentials of kubelets
// named like system:node:ip-10-0-12-34.ec2.internal (TestUsageStaysWithinItsBound).
const MaxUsageBytes = 768 << 10

// DataKey is the key of a usage ConfigMap that holds the record.
const DataKey = "usage.json"

// Resolution is how far a credential's lastSeen must advance for the record
// to be written at once; a smaller advance, and an earlier firstSeen, are
// written Resolution later (see Observe), so that a client in constant use
// costs a write a minute.
const Resolution = time.Minute

// Settling is how long after a rotation became Prepared the gate waits for
// the record to show every use since: Resolution, and the API server's
// batching (--audit-webhook-batch-max-wait, 30s by default) and retries.
const Settling = Resolution + time.Minute

// Silence is how long the record may go without a new use before the gate
// takes the audit webhook for broken: the control plane's own clients
// (kube-controller-manager, kube-scheduler, Carousel) call the API server
// all the time, and the record trails them by Settling at most.
const Silence = 2 * Settling

// Newest is when the latest use in the record was seen, by now; zero when
// there is none. A use recorded later than now (by a clock ahead) says
// nothing of whether uses are still being recorded.
func (u *Usage) Newest(now time.Time) time.Time {
	var newest time.Time
	for _, c := range u.Credentials {
		if c.LastSeen.After(newest) && !c.LastSeen.After(now) {
			newest = c.LastSeen
		}
	}
	return newest
}

// Retention is how long a credential not seen again stays in the record:
// longer than the longest kubeconfig kubectl carousel issues (24h).
const Retention = 25 * time.Hour

// Parse reads a record; empty data is an empty record.
func Parse(data string) (*Usage, error) {
	return parseRecord[Usage](data, "the client-certificate usage record")
}

// String is the record as stored.
func (u *Usage) String() string { return storedRecord(u) }

// parseRecord reads a record of the package, what, as stored in a
// ConfigMap; empty data is an empty record.
func parseRecord[T any](data, what string) (*T, error) {
	record := new(T)
	if data == "" {
		return record, nil
	}
	if err := json.Unmarshal([]byte(data), record); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", what, err)
	}
	return record, nil
}

// storedRecord is a record of the package as stored in a ConfigMap.
func storedRecord(record any) string {
	data, err := json.Marshal(record)
	if err != nil {
		panic(err) // only strings and times
	}
	return string(data)
}

// Observe drops what was last seen before now-Retention and merges seen
// (each with the first and last time of a batch) into the record. It says
// whether the record changed: a credential not recorded yet, one seen
// resolution or more after its recorded lastSeen, one that aged out, or one
// left out later than Unrecorded. A lastSeen that advances by less than
// resolution, and a firstSeen earlier than recorded (a late batch), are
// applied only when the record changes anyway; otherwise they are returned
// as deferred, for a later Observe with no resolution to write, so that the
// record is at most resolution behind. (A firstSeen written at once let a
// sender, who chooses the times, have the record written for every batch,
// each a nanosecond earlier; a lastSeen cannot pass the batch's arrival, so
// each credential costs at most a write a resolution.)
//
// A credential not recorded yet is left out when its entry could take the
// record past MaxUsageBytes; when its lastSeen (now at the latest: it was
// seen by then, whatever a clock says) is later than Unrecorded, Unrecorded
// moves to it plus resolution, so that a full record in constant use is
// written a minute apart too.
func (u *Usage) Observe(seen []Credential, now time.Time, resolution time.Duration) (changed bool, deferred []Credential) {
	return u.observe(seen, now, resolution, MaxUsageBytes)
}

// observe is Observe with the record's bound, maxBytes, as a parameter.
func (u *Usage) observe(seen []Credential, now time.Time, resolution time.Duration, maxBytes int) (changed bool, deferred []Credential) {
	// A time later than now (recorded by a clock ahead, or by hand) is taken
	// as now: it was seen by then.
	for i := range u.Credentials {
		c := &u.Credentials[i]
		if c.FirstSeen.After(now) {
			c.FirstSeen, changed = now, true
		}
		if c.LastSeen.After(now) {
			c.LastSeen, changed = now, true
		}
	}
	cutoff := now.Add(-Retention)
	kept := slices.DeleteFunc(u.Credentials, func(c Credential) bool { return c.LastSeen.Before(cutoff) })
	if len(kept) != len(u.Credentials) {
		changed = true
	}
	u.Credentials = kept
	size := -1 // the record's size bound, counted at the first new credential
	for _, s := range seen {
		if s.LastSeen.Before(cutoff) {
			continue
		}
		i, found := slices.BinarySearchFunc(u.Credentials, s, compare)
		if !found {
			if size < 0 {
				size = u.storedBytesBound()
			}
			if size+entryBytesBound(s) > maxBytes {
				changed = u.LeaveOut(s.LastSeen, now, resolution) || changed
				continue
			}
			size += entryBytesBound(s)
			u.Credentials = slices.Insert(u.Credentials, i, s)
			changed = true
			continue
		}
		c := &u.Credentials[i]
		earlier, later := s.FirstSeen.Before(c.FirstSeen), s.LastSeen.After(c.LastSeen)
		switch {
		case !earlier && !later:
		case resolution > 0 && (!later || s.LastSeen.Sub(c.LastSeen) < resolution):
			deferred = append(deferred, s)
		default:
			if earlier {
				c.FirstSeen = s.FirstSeen
			}
			if later {
				c.LastSeen = s.LastSeen
			}
			changed = true
		}
	}
	if changed && len(deferred) > 0 {
		u.observe(deferred, now, 0, maxBytes)
		deferred = nil
	}
	return changed, deferred
}

// LeaveOut records that a sighting last seen at last (now at the latest: it
// was seen by then, whatever a clock says) is not in the record: when last
// is later than Unrecorded (or there is none), Unrecorded moves to last plus
// resolution. It says whether the record changed.
func (u *Usage) LeaveOut(last, now time.Time, resolution time.Duration) bool {
	if last.After(now) {
		last = now
	}
	if u.Unrecorded != nil && !last.After(*u.Unrecorded) {
		return false
	}
	until := last.Add(resolution)
	u.Unrecorded = &until
	return true
}

// The most bytes of the stored record's JSON besides its entries (with
// Unrecorded), of an entry besides its strings (with its comma), and of a
// time (time.RFC3339Nano, with a zone offset, quoted).
const (
	maxRecordOverhead = len(`{"credentials":null,"unrecorded":}`) + maxTimeBytes
	maxEntryOverhead  = len(`{"user":"","sha256":"","firstSeen":,"lastSeen":},`) + 2*maxTimeBytes
	maxTimeBytes      = len(`"2006-01-02T15:04:05.999999999-07:00"`)
)

// Room is how many more bytes the record's JSON may take: Observe leaves
// out a credential not recorded yet whose EntryBytes are more.
func (u *Usage) Room() int { return MaxUsageBytes - u.storedBytesBound() }

// EntryBytes is the most bytes c's entry can take in the record's JSON.
func EntryBytes(c Credential) int { return entryBytesBound(c) }

// storedBytesBound is the most bytes the record's JSON can take, counted
// instead of encoded (entryBytesBound of each entry): Observe needs it for
// every batch with a new credential.
func (u *Usage) storedBytesBound() int {
	n := maxRecordOverhead
	for _, c := range u.Credentials {
		n += entryBytesBound(c)
	}
	return n
}

// entryBytesBound is the most bytes c can take in the record's JSON.
func entryBytesBound(c Credential) int {
	return maxEntryOverhead + maxJSONStringBytes(c.User) + maxJSONStringBytes(c.Fingerprint)
}

// maxJSONStringBytes is the most bytes encoding/json writes for s, quotes
// left out: a byte of a control character, of <, > or &, or of anything not
// ASCII counts six (encoding/json writes the first as \u00XX, a byte of
// invalid UTF-8 as \ufffd, and U+2028 and U+2029 escaped).
func maxJSONStringBytes(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b < 0x20 || b == '<' || b == '>' || b == '&' || b >= 0x80:
			n += 6
		case b == '"' || b == '\\':
			n += 2
		default:
			n++
		}
	}
	return n
}

func compare(a, b Credential) int {
	if c := strings.Compare(a.User, b.User); c != 0 {
		return c
	}
	return strings.Compare(a.Fingerprint, b.Fingerprint)
}
