package oldca

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

// FuzzObserve checks the record's promises on any sequence of sightings,
// under a bound of a few entries (the first byte): it stays sorted with one
// entry per credential and within its bound, an entry's firstSeen never
// follows its lastSeen, nothing older than the retention stays, a sighting
// left out is no later than Unrecorded, the same batch observed twice
// changes nothing the second time, and what it defers reaches the record
// once written.
func FuzzObserve(f *testing.F) {
	f.Add([]byte{255, 0, 1, 10, 3, 1, 2, 200, 4, 2, 0, 90, 1})
	f.Add([]byte{255, 5, 5, 5, 5, 5, 5, 255, 255})
	f.Add([]byte{40, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4})
	f.Add([]byte("\xff00\xc801000")) // testdata's input from before the bound, with room to spare
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		maxBytes := maxRecordOverhead + int(data[0])*5 // up to 10 entries of the one-letter names below
		data = data[1:]
		u := &Usage{}
		now := t0
		for len(data) >= 4 {
			user, fp, first, span := data[0]%4, data[1]%3, data[2], data[3]
			data = data[4:]
			c := Credential{User: string('a' + rune(user)), Fingerprint: string('0' + rune(fp)),
				FirstSeen: t0.Add(time.Duration(first) * 10 * time.Minute)}
			c.LastSeen = c.FirstSeen.Add(time.Duration(span) * 10 * time.Second)
			if c.LastSeen.After(now) {
				now = c.LastSeen
			}
			batch := []Credential{c}
			_, deferred := u.observe(batch, now, Resolution, maxBytes)
			if changed, _ := u.observe(batch, now, Resolution, maxBytes); changed {
				t.Fatalf("the same batch observed twice changed the record the second time: %+v", c)
			}
			if _, recorded := slices.BinarySearchFunc(u.Credentials, c, compare); !recorded && !c.LastSeen.Before(now.Add(-Retention)) &&
				(u.Unrecorded == nil || c.LastSeen.After(*u.Unrecorded)) {
				t.Fatalf("a sighting left out, %+v, is later than unrecorded, %v", c, u.Unrecorded)
			}
			if n := len(u.String()); n > maxBytes {
				t.Fatalf("the record holds %d bytes, more than its bound, %d", n, maxBytes)
			}
			if len(deferred) > 0 {
				u.observe(deferred, now, 0, maxBytes)
				if i, ok := slices.BinarySearchFunc(u.Credentials, c, compare); !ok || u.Credentials[i].LastSeen.Before(c.LastSeen) {
					t.Fatalf("a deferred sighting, written, did not reach the record: %+v", c)
				}
			}
			if !slices.IsSortedFunc(u.Credentials, compare) {
				t.Fatalf("record not sorted: %+v", u.Credentials)
			}
			for i, r := range u.Credentials {
				if i > 0 && compare(u.Credentials[i-1], r) == 0 {
					t.Fatalf("credential recorded twice: %+v", r)
				}
				if r.FirstSeen.After(r.LastSeen) {
					t.Fatalf("firstSeen after lastSeen: %+v", r)
				}
				if r.LastSeen.Before(now.Add(-Retention)) {
					t.Fatalf("credential kept past the retention: %+v (now %v)", r, now)
				}
			}
		}
	})
}

// FuzzMaxJSONStringBytes checks that the usage record's bound counts at
// least the bytes encoding/json writes for any user name or fingerprint.
func FuzzMaxJSONStringBytes(f *testing.F) {
	for _, s := range []string{"system:node:w0", `<&>"\`, "\x00\x7f\u2028\u00e9", "\xff\xc3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		encoded, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(encoded) - 2; n > maxJSONStringBytes(s) {
			t.Fatalf("%q encodes to %d bytes, more than the %d counted", s, n, maxJSONStringBytes(s))
		}
	})
}

// FuzzStranded checks Stranded against its definition on any record: a
// user is listed, once, exactly when it holds a kubeconfig from the CA
// dropped that has not expired and none from the CA that stays recorded
// after it, with the expiry of the last of them.
func FuzzStranded(f *testing.F) {
	f.Add([]byte{0, 1, 10, 30, 0, 0, 20, 30, 1, 1, 5, 2})
	f.Add([]byte{2, 1, 0, 255, 2, 0, 0, 255, 2, 2, 3, 200})
	f.Fuzz(func(t *testing.T, data []byte) {
		issuers := []string{"stays", "dropped", "gone"}
		k := &Kubeconfigs{}
		for len(data) >= 4 {
			user, issuer, issued, ttl := data[0]%3, data[1]%3, data[2], data[3]
			data = data[4:]
			i := IssuedCertificate{User: string('a' + rune(user)), Issuer: issuers[issuer], IssuedAt: t0.Add(time.Duration(issued) * time.Minute),
				Fingerprint: fmt.Sprint(len(k.Issued))}
			i.NotAfter = i.IssuedAt.Add(time.Duration(ttl) * time.Minute)
			k.Issued = append(k.Issued, i)
		}
		now := t0.Add(2 * time.Hour)
		listed := map[string]time.Time{}
		for _, d := range k.Stranded("dropped", "stays", now) {
			if _, twice := listed[d.Name]; twice {
				t.Fatalf("user %s listed twice", d.Name)
			}
			listed[d.Name] = d.Expires
		}
		for _, user := range []string{"a", "b", "c"} {
			var until time.Time
			for _, i := range k.Issued {
				switch {
				case i.User != user:
				case i.Issuer == "stays":
					until = time.Time{} // moved, past everything before
				case i.Issuer == "dropped" && now.Before(i.NotAfter) && i.NotAfter.After(until):
					until = i.NotAfter
				}
			}
			if got, ok := listed[user]; ok != !until.IsZero() || !got.Equal(until) {
				t.Fatalf("user %s listed %v until %v, want until %v: %+v", user, ok, got, until, k.Issued)
			}
		}
	})
}

// FuzzKubeletCertificates checks the kubelet record on any sequence of
// batches: it holds exactly the last certificate added of each node and CA
// that has not expired at the last addition, in the order they were added.
func FuzzKubeletCertificates(f *testing.F) {
	f.Add([]byte{0, 1, 10, 30, 0, 0, 20, 30, 1, 1, 5, 2})
	f.Add([]byte{2, 1, 0, 255, 2, 1, 0, 1, 2, 2, 3, 200})
	f.Fuzz(func(t *testing.T, data []byte) {
		k := &KubeletCertificates{}
		var added []IssuedCertificate
		now := t0
		for len(data) >= 4 {
			node, issuer, batch, serving, ttl := data[0]%3, data[1]%3, data[2]%4, data[2]&4 != 0, data[3]
			data = data[4:]
			c := IssuedCertificate{User: nodeUserPrefix + string('a'+rune(node)), Issuer: string('x' + rune(issuer)),
				Fingerprint: fmt.Sprint(len(added)), IssuedAt: now, Serving: serving}
			c.NotAfter = now.Add(time.Duration(ttl) * time.Minute)
			added = append(added, c)
			k.Add([]IssuedCertificate{c}, now)
			now = now.Add(time.Duration(batch) * time.Minute)
		}
		var want []IssuedCertificate
		for i, c := range added {
			later := slices.ContainsFunc(added[i+1:], func(l IssuedCertificate) bool {
				return l.User == c.User && l.Serving == c.Serving && l.Issuer == c.Issuer
			})
			if !later && c.NotAfter.After(lastAddition(added)) {
				want = append(want, c)
			}
		}
		if !slices.Equal(k.Signed, want) {
			t.Fatalf("record %+v, want %+v", k.Signed, want)
		}
	})
}

// lastAddition is when the last of added was added.
func lastAddition(added []IssuedCertificate) time.Time {
	if len(added) == 0 {
		return t0
	}
	return added[len(added)-1].IssuedAt
}
