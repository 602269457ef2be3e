package auditwebhook

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/authentication/user"
)

// FuzzDecodingMatchesTheAuditTypes: whatever body decodes as an
// auditv1.EventList decodes as the receiver's eventList too, to the same
// type and the same client certificates in use.
func FuzzDecodingMatchesTheAuditTypes(f *testing.F) {
	watch := event("operator", "X509SHA256="+fp("ee"), t0)
	watch.StageTimestamp.Time = t0.Add(40 * time.Minute)
	f.Add(batch(event("ci", "X509SHA256="+fp("ab"), t0), watch, event("pod", "JTI=1234", t0), event("", "X509SHA256="+fp("cd"), t0)))
	f.Add([]byte(`{"apiVersion":"audit.k8s.io/v1","kind":"EventList","items":[{"user":{"username":"a","extra":{"authentication.kubernetes.io/credential-id":["X509SHA256=` +
		fp("01") + `","X509SHA256=` + fp("02") + `"]}},"stageTimestamp":"2026-11-26T12:00:00.000001Z","objectRef":{"resource":"pods"}}]}`))
	f.Add([]byte(`{"items":[{"USER":{"UserName":"b","Extra":{"Authentication.Kubernetes.io/Credential-ID":["X509SHA256=` + fp("03") + `"]}}}]}`))
	f.Add([]byte(`{"items":[{"user":null},{"user":{"extra":null}},{"requestReceivedTimestamp":null}]}`))
	f.Add([]byte(`{"items":[{"user":{"username":"c","extra":{"a":["x"],"authentication.kubernetes.io/credential-id":["X509SHA256=` + fp("04") +
		`"],"\u0061uthentication.kubernetes.io/credential-id":["X509SHA256=` + fp("05") + `"]}}}],"items":null,"ITEMS":[{"user":{"extra":{}}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var full auditv1.EventList
		if json.Unmarshal(body, &full) != nil || len(full.Items) > maxEventsPerBatch {
			return
		}
		lean, err := decodeSmallBatch(body)
		if err != nil {
			t.Fatalf("an EventList the audit types decode is refused: %v", err)
		}
		large, err := decodeLargeBatch(body)
		if err != nil {
			t.Fatalf("an EventList the audit types decode is refused as a large batch: %v", err)
		}
		if lean.TypeMeta != full.TypeMeta || large.TypeMeta != full.TypeMeta {
			t.Fatalf("type %+v, as a large batch %+v, the audit types read %+v", lean.TypeMeta, large.TypeMeta, full.TypeMeta)
		}
		fromFull := make([]auditEvent, len(full.Items))
		for i, e := range full.Items {
			fromFull[i].User.Username = e.User.Username
			// Every ID as the audit types read them: what credentialsIn
			// reads of them is what the receiver keeps, unless there are more
			// client-certificate IDs than it keeps (TestAnEventKeepsItsFirstDistinctClientCertificateIDs).
			fromFull[i].User.Extra = credentialIDs(e.User.Extra[user.CredentialIDKey])
			if distinctCertificateIDs(fromFull[i].User.Extra) > maxCredentialIDs {
				fromFull[i].User.Extra = keptCredentialIDs(fromFull[i].User.Extra)
			}
			fromFull[i].RequestReceivedTimestamp, fromFull[i].StageTimestamp = e.RequestReceivedTimestamp, e.StageTimestamp
		}
		// Arriving in 2262, the batch keeps every time the decoders read.
		arrival := time.Unix(0, math.MaxInt64)
		want := credentialsIn(fromFull, arrival)
		if got := credentialsIn(lean.Items, arrival); !reflect.DeepEqual(got, want) {
			t.Fatalf("client certificates %+v, from the audit types %+v", got, want)
		}
		if got := credentialsIn(large.Items, arrival); !reflect.DeepEqual(got, want) {
			t.Fatalf("client certificates as a large batch %+v, from the audit types %+v", got, want)
		}
	})
}

// distinctCertificateIDs counts the distinct client-certificate IDs of ids.
func distinctCertificateIDs(ids []string) int {
	distinct := map[string]bool{}
	for _, id := range ids {
		if fingerprint, ok := strings.CutPrefix(id, x509CredentialPrefix); ok && isHex(fingerprint) {
			distinct[id] = true
		}
	}
	return len(distinct)
}
