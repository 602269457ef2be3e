package oldca

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// FuzzObserve checks the record's promises on any sequence of sightings:
// it stays sorted with one entry per credential, an entry's firstSeen never
// follows its lastSeen, nothing older than the retention stays, the same
// batch observed twice changes nothing the second time, and what it defers
// reaches the record once written.
func FuzzObserve(f *testing.F) {
	f.Add([]byte{0, 1, 10, 3, 1, 2, 200, 4, 2, 0, 90, 1})
	f.Add([]byte{5, 5, 5, 5, 5, 5, 255, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
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
			_, deferred := u.Observe(batch, now, Resolution)
			if changed, _ := u.Observe(batch, now, Resolution); changed {
				t.Fatalf("the same batch observed twice changed the record the second time: %+v", c)
			}
			if len(deferred) > 0 {
				u.Observe(deferred, now, 0)
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

// FuzzStranded checks Stranded against its definition on any record: a
// user is listed, once, exactly when it holds a kubeconfig from another CA
// that has not expired and none from the CA that stays issued after it.
func FuzzStranded(f *testing.F) {
	f.Add([]byte{0, 1, 10, 30, 0, 0, 20, 30, 1, 1, 5, 2})
	f.Add([]byte{2, 1, 0, 255, 2, 0, 0, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		const stays = "new"
		k := &Kubeconfigs{}
		for len(data) >= 4 {
			user, fromStays, issued, ttl := data[0]%3, data[1]%2 == 0, data[2], data[3]
			data = data[4:]
			i := Kubeconfig{User: string('a' + rune(user)), Issuer: "old", IssuedAt: t0.Add(time.Duration(issued) * time.Minute)}
			if fromStays {
				i.Issuer = stays
			}
			i.NotAfter = i.IssuedAt.Add(time.Duration(ttl) * time.Minute)
			i.Fingerprint = fmt.Sprint(len(k.Issued))
			k.Issued = append(k.Issued, i)
		}
		slices.SortStableFunc(k.Issued, func(a, b Kubeconfig) int { return a.IssuedAt.Compare(b.IssuedAt) })
		now := t0.Add(2 * time.Hour)
		listed := map[string]bool{}
		for _, d := range k.Stranded(stays, now) {
			if listed[d.Name] {
				t.Fatalf("user %s listed twice", d.Name)
			}
			listed[d.Name] = true
		}
		for _, user := range []string{"a", "b", "c"} {
			want := false
			for _, i := range k.Issued {
				if i.User != user {
					continue
				}
				switch {
				case i.Issuer == stays:
					want = false // moved, past everything before
				case now.Before(i.NotAfter):
					want = true
				}
			}
			if listed[user] != want {
				t.Fatalf("user %s listed %v, want %v: %+v", user, listed[user], want, k.Issued)
			}
		}
	})
}
