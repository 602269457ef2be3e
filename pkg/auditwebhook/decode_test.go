package auditwebhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestADecodedBatchHoldsLittleMoreThanItsEvents decodes batches of many
// small events, each with a user.extra the receiver does not read, the
// most events a body of their size may hold on either path: what the
// decoded batch holds is its events' fixed part and at most the body's size
// of their strings. A map held per event's extra took a 3 MiB batch of
// 100,000 events to 45 MiB; so many objects are now decoded one at a time,
// and refused past maxEventsPerBatch.
func TestADecodedBatchHoldsLittleMoreThanItsEvents(t *testing.T) {
	for _, tt := range []struct {
		name, event string
		events      int
		small       bool
		err         error
	}{
		// The list's object and two commas before its items, one comma
		// after each event but the last, and the braces and commas in an event.
		{"at once", `{"user":{"extra":{"k":["v"]}}}`, (smallBatchObjects - 2) / 3, true, nil},
		{"credential IDs at once", `{"user":{"username":"u","extra":{"authentication.kubernetes.io/credential-id":["X509SHA256=ab"],"k":["v"]}}}`,
			(smallBatchObjects - 2) / 3, true, nil},
		{"one event at a time", `{"user":{"extra":{` + strings.Repeat(`"k":["v"],`, 10) + `"k":["v"]}}}`, maxEventsPerBatch, false, nil},
		{"too many objects at once", `{"user":{"extra":{"k":["v"]}}}`, smallBatchCommas - 2, false, errTooManyEvents},
		{"an array of credential IDs as long as it may be", `{"user":{"extra":{"authentication.kubernetes.io/credential-id":[` +
			strings.Repeat(`"",`, maxExtraBytes/3-30) + `""]}}}`, 1, false, nil},
		{"as many other extra keys as may be", `{"user":{"extra":{` + strings.Repeat(`"":[],`, maxExtraBytes/6-10) + `"":[]}}}`, 1, false, nil},
		{"an array of a million credential IDs", `{"user":{"extra":{"authentication.kubernetes.io/credential-id":[` + strings.Repeat(`"",`, 1<<20) + `""]}}}`,
			1, false, errExtraTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` +
				strings.Repeat(tt.event+",", tt.events-1) + tt.event + `]}`)
			if small := isSmallBatch(body); small != tt.small {
				t.Fatalf("the batch is small: %t", small)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			batch, err := decodeBatch(body)
			runtime.GC()
			runtime.ReadMemStats(&after)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("decoding: %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil || len(batch.Items) != tt.events {
				t.Fatalf("decoded %d events, %v; want %d", len(batch.Items), err, tt.events)
			}
			held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("%d events in %d KiB hold %d KiB once decoded", tt.events, len(body)>>10, held>>10)
			// An event's fixed part is 88 bytes; its slice may be twice as long.
			if bound := int64(len(body)) + int64(tt.events)*2*88; held > bound {
				t.Errorf("a batch of %d events in %d KiB holds %d KiB once decoded, want at most %d KiB", tt.events, len(body)>>10, held>>10, bound>>10)
			}
			runtime.KeepAlive(batch)
		})
	}
}

// Decoding a batch allocates no more than it reserves for it (decodeCost),
// with strings the decoder must unquote into a buffer and then copy.
func TestDecodingAllocatesNoMoreThanItsCost(t *testing.T) {
	long := strings.Repeat("a", 4<<20)
	for name, event := range map[string]string{
		"a user name with an escape":   `{"user":{"username":"\n` + long + `"}}`,
		"an extra value with escapes":  `{"user":{"extra":{"k":["` + strings.Repeat(`\u00e9`, 1<<20) + `"]}}}`,
		"a user name of plain letters": `{"user":{"username":"` + long + `"}}`,
		// Decoded at once (fewer than smallBatchCommas commas), into a map
		// of as many entries.
		"an extra of many keys": `{"user":{"extra":{` + manyKeys(smallBatchCommas-10) + `}}}`,
		// Decoded an event at a time (the commas of the user names of the
		// events before), its extra, as large as it may be, by a decoder of
		// its own.
		"an extra as large as may be": strings.Repeat(`{"user":{"username":"`+strings.Repeat(",", 1000)+`"}},`, smallBatchCommas/1000) +
			`{"user":{"extra":{"k":["` + strings.Repeat("a", maxExtraBytes-20) + `"]}}}`,
	} {
		body := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + event + `]}`)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		batch, err := decodeBatch(body)
		runtime.ReadMemStats(&after)
		if err != nil || len(batch.Items) != strings.Count(event, `{"user"`) {
			t.Fatalf("%s: decoded %d events, %v", name, len(batch.Items), err)
		}
		if allocated := int64(after.TotalAlloc - before.TotalAlloc); allocated > decodeCost(body) {
			t.Errorf("%s: decoding %d KiB allocated %d KiB, more than the %d KiB it reserves", name, len(body)>>10, allocated>>10, decodeCost(body)>>10)
		}
	}
}

// manyKeys are n JSON object members "<i>":[], apart.
func manyKeys(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%d":[]`, i)
	}
	return b.String()
}

// The costliest batch the receiver reads, a body of unknown length up to
// maxBatchBytes decoded either way, fits one Cluster's bound alone: no batch
// is refused for the bounds for ever.
func TestTheCostliestBatchFitsOneClustersBound(t *testing.T) {
	large := bytes.Repeat([]byte{','}, maxBatchBytes) // decoded an event at a time
	small := bytes.Repeat([]byte{' '}, maxBatchBytes) // decoded at once
	// with as many objects and commas as it may have
	copy(small, append(bytes.Repeat([]byte{'{'}, smallBatchObjects-1), bytes.Repeat([]byte{','}, smallBatchCommas-1)...))
	for name, body := range map[string][]byte{"large": large, "small": small} {
		if isSmallBatch(body) != (name == "small") {
			t.Fatalf("the %s batch is small: %t", name, isSmallBatch(body))
		}
		if cost := readCost(maxBatchBytes) + decodeCost(body); cost > MaxBytesInFlightPerCluster {
			t.Errorf("the costliest %s batch reserves %d MiB, more than one Cluster's bound, %d MiB", name, cost>>20, MaxBytesInFlightPerCluster>>20)
		}
	}
}

func TestAnEventKeepsItsFirstDistinctClientCertificateIDs(t *testing.T) {
	id := func(i int) string { return x509CredentialPrefix + fp(fmt.Sprintf("%02x", i)) }
	var many []string
	for i := range maxCredentialIDs + 2 {
		many = append(many, id(i), id(i))
	}
	for _, tt := range []struct {
		name   string
		values []string
		want   credentialIDs
	}{
		{"none", nil, nil},
		{"one", []string{id(1)}, credentialIDs{id(1)}},
		{"a token's and a certificate's", []string{"JTI=1234", id(1)}, credentialIDs{id(1)}},
		{"not a SHA-256", []string{x509CredentialPrefix + "abcd", x509CredentialPrefix + fp("zz")}, nil},
		{"duplicates, and more than are kept", many, credentialIDs{id(0), id(1), id(2), id(3), id(4), id(5), id(6), id(7)}},
	} {
		got := keptCredentialIDs(tt.values)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: kept %q, want %q", tt.name, got, tt.want)
		}
		body := `{"items":[{"user":{"extra":{"authentication.kubernetes.io/credential-id":` + mustJSON(t, tt.values) + `}}}]}`
		large, err := decodeLargeBatch([]byte(body))
		if err != nil || len(large.Items) != 1 || !slices.Equal(large.Items[0].User.Extra, tt.want) {
			t.Errorf("%s, one event at a time: %+v, %v; want %q", tt.name, large.Items, err, tt.want)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
