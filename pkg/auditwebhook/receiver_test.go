package auditwebhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/oldca"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// arrival is when the tests' receivers take their first batch.
var arrival = t0.Add(time.Hour)

// fp is a fingerprint as the API server writes one: 64 hex digits.
func fp(prefix string) string { return prefix + strings.Repeat("0", 64-len(prefix)) }

func event(user, credentialID string, at time.Time) auditv1.Event {
	info := authnv1.UserInfo{Username: user}
	if credentialID != "" {
		info.Extra = map[string]authnv1.ExtraValue{"authentication.kubernetes.io/credential-id": {credentialID}}
	}
	return auditv1.Event{User: info, RequestReceivedTimestamp: metav1.NewMicroTime(at), StageTimestamp: metav1.NewMicroTime(at.Add(time.Millisecond))}
}

func batch(events ...auditv1.Event) []byte {
	list := auditv1.EventList{TypeMeta: metav1.TypeMeta{APIVersion: "audit.k8s.io/v1", Kind: "EventList"}, Items: events}
	data, err := json.Marshal(list)
	if err != nil {
		panic(err)
	}
	return data
}

// credentialsOf decodes events as the receiver does a batch of them that
// arrives at arrival and returns the client certificates they show in use.
func credentialsOf(t testing.TB, arrival time.Time, events ...auditv1.Event) []oldca.Credential {
	t.Helper()
	var list eventList
	if err := json.Unmarshal(batch(events...), &list); err != nil {
		t.Fatal(err)
	}
	return credentialsIn(list.Items, arrival)
}

type setup struct {
	receiver *Receiver
	client   client.Client
	writes   *atomic.Int64
	clock    *clocktesting.FakeClock
}

func newSetup(t testing.TB) setup {
	t.Helper()
	cluster := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod", UID: "uid-prod"}}
	secret := func(cl, token string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: credentials.AuditWebhookSecretName(cl),
			Labels: map[string]string{v1alpha1.LabelCluster: cl}}, Data: map[string][]byte{DataKeyToken: []byte(token)}}
	}
	writes := &atomic.Int64{}
	// Counted once made, so that a test that waits for a count may read what was written.
	counted := func(err error) error {
		if err == nil {
			writes.Add(1)
		}
		return err
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(cluster, secret("prod", "s3cret"), secret("staging", "other")).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				return counted(c.Create(ctx, obj, opts...))
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				return counted(c.Update(ctx, obj, opts...))
			},
		}).Build()
	// The batches arrive after the events they carry: the tests' events are
	// from within the hour after t0.
	clk := clocktesting.NewFakeClock(arrival)
	return setup{receiver: &Receiver{Reader: c, APIReader: c, Client: c, Clock: clk}, client: c, writes: writes, clock: clk}
}

// post sends a batch to the prod Cluster's path, with its token.
// addToken gives a Cluster in namespace an audit-webhook Secret with token.
func (s setup) addToken(t *testing.T, namespace, cluster, token string) {
	t.Helper()
	if err := s.client.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: credentials.AuditWebhookSecretName(cluster), Labels: map[string]string{v1alpha1.LabelCluster: cluster}},
		Data:       map[string][]byte{DataKeyToken: []byte(token)},
	}); err != nil {
		t.Fatal(err)
	}
}

func (s setup) post(body []byte) *httptest.ResponseRecorder {
	return s.postTo("prod", "s3cret", body)
}

// postTo sends a batch to a Cluster's path in team-a, with token.
func (s setup) postTo(cluster, token string, body []byte) *httptest.ResponseRecorder {
	return s.postIn("team-a", cluster, token, body)
}

// postIn is postTo for a Cluster in namespace.
func (s setup) postIn(namespace, cluster, token string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/audit/"+namespace+"/"+cluster, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	s.receiver.ServeHTTP(w, req)
	return w
}

// postUntilAdmitted posts a batch again while it is refused for the batches in
// flight, as the API server does, for at most ten seconds, and fails the test
// unless it is then taken (200).
func (s setup) postUntilAdmitted(t *testing.T, body []byte) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		switch w := s.post(body); {
		case w.Code == http.StatusOK:
			return
		case w.Code != http.StatusTooManyRequests:
			t.Errorf("a batch answered %d: %s", w.Code, w.Body)
			return
		case time.Now().After(deadline):
			t.Error("a batch was refused for the batches in flight for ten seconds")
			return
		}
	}
}

// countRecordReads has the receiver read through a client that counts its
// reads of ConfigMaps (the record), and returns the count.
func (s setup) countRecordReads() *atomic.Int64 {
	var reads atomic.Int64
	s.receiver.APIReader = interceptor.NewClient(s.client.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				reads.Add(1)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	return &reads
}

// postSighting sends the prod Cluster a batch that shows ci's certificate in
// use after t0, and fails the test unless it is recorded.
func (s setup) postSighting(t *testing.T, after time.Duration) {
	t.Helper()
	if w := s.post(batch(event("ci", "X509SHA256="+fp("cc"), t0.Add(after)))); w.Code != http.StatusOK {
		t.Fatalf("answered %d %q", w.Code, w.Body.String())
	}
}

// clustersHeld is how many Clusters the receiver keeps a state of.
func (s setup) clustersHeld() int {
	s.receiver.mu.Lock()
	defer s.receiver.mu.Unlock()
	return len(s.receiver.states)
}

// waiting is how many sightings of the prod Cluster wait for its next write.
func (s setup) waiting() int {
	key := client.ObjectKey{Namespace: "team-a", Name: "prod"}
	st := s.receiver.lock(key)
	defer s.receiver.unlock(key, st)
	return len(st.pending)
}

// count is how many batches are in flight.
func (b *batchesInFlight) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

func (s setup) usage(t *testing.T) *oldca.Usage {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := s.client.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: credentials.CertificateUsageConfigMapName("prod")}, cm); err != nil {
		t.Fatalf("reading the usage ConfigMap: %v", err)
	}
	if ref := metav1.GetControllerOf(cm); ref == nil || ref.UID != "uid-prod" || cm.Labels[v1alpha1.LabelCluster] != "prod" {
		t.Fatalf("the usage ConfigMap is not the Cluster's: %+v", cm.ObjectMeta)
	}
	u, err := oldca.Parse(cm.Data[oldca.DataKey])
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestTheReceiverRefuses(t *testing.T) {
	s := newSetup(t)
	good := batch(event("ci", "X509SHA256="+fp("ab"), t0))
	for _, tt := range []struct {
		name, method, path, token string
		body                      []byte
		code                      int
		message                   string
		// leavesOut: refused for good after it was read, it records that
		// its sightings are left out (TestABatchRefusedForGoodLeavesItsSightingsOut).
		leavesOut bool
	}{
		{name: "a GET", method: http.MethodGet, path: "/audit/team-a/prod", token: "s3cret", code: http.StatusMethodNotAllowed},
		{name: "a path without the Cluster", path: "/audit/team-a", token: "s3cret", body: good, code: http.StatusNotFound},
		{name: "a path too deep", path: "/audit/team-a/prod/x", token: "s3cret", body: good, code: http.StatusNotFound},
		{name: "no token", path: "/audit/team-a/prod", body: good, code: http.StatusUnauthorized, message: "bearer token is required"},
		{name: "a wrong token", path: "/audit/team-a/prod", token: "guess", body: good, code: http.StatusUnauthorized},
		{name: "another Cluster's token", path: "/audit/team-a/prod", token: "other", body: good, code: http.StatusUnauthorized},
		{name: "a Cluster without a Secret", path: "/audit/team-a/ghost", token: "s3cret", body: good, code: http.StatusUnauthorized},
		{name: "a body that is not JSON", path: "/audit/team-a/prod", token: "s3cret", body: []byte("{"), code: http.StatusBadRequest, leavesOut: true},
		{name: "a body larger than a batch may be", path: "/audit/team-a/prod", token: "s3cret", body: bytes.Repeat([]byte(" "), maxBatchBytes+1),
			code: http.StatusBadRequest, message: "request body too large", leavesOut: true},
		{name: "a batch of more events than a batch may have", path: "/audit/team-a/prod", token: "s3cret",
			body: []byte(`{"apiVersion":"audit.k8s.io/v1","kind":"EventList","items":[` + strings.Repeat("{},", max(maxEventsPerBatch, smallBatchCommas)) + `{}]}`),
			code: http.StatusRequestEntityTooLarge, message: "at most 10000 events", leavesOut: true},
		{name: "an object that is not an EventList", path: "/audit/team-a/prod", token: "s3cret", body: []byte(`{"apiVersion":"v1","kind":"ConfigMap"}`),
			code: http.StatusBadRequest, message: "expected an EventList of audit.k8s.io/v1", leavesOut: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			req := httptest.NewRequest(method, tt.path, bytes.NewReader(tt.body))
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			w := httptest.NewRecorder()
			writes := s.writes.Load()
			s.receiver.ServeHTTP(w, req)
			if w.Code != tt.code || !strings.Contains(w.Body.String(), tt.message) {
				t.Fatalf("answered %d %q, want %d …%s…", w.Code, w.Body.String(), tt.code, tt.message)
			}
			if n := s.writes.Load() - writes; n != 0 && !tt.leavesOut {
				t.Fatalf("a refused request wrote %d objects", n)
			}
		})
	}
}

// heldBatch is a batch the receiver has admitted and is still reading: its
// body comes through a pipe, which finish completes.
type heldBatch struct {
	body   *io.PipeWriter
	length int64
	answer chan *httptest.ResponseRecorder
}

// heldBatchLength is the Content-Length of a held batch, as kube-apiserver
// sends one.
const heldBatchLength = 64 << 10

// holdBatch sends a batch of heldBatchLength to cluster's path with token,
// and returns once the receiver reads its body.
func (s setup) holdBatch(t *testing.T, cluster, token string) heldBatch {
	t.Helper()
	return s.holdBatchOf(t, cluster, token, heldBatchLength)
}

// holdBatchOf sends a batch whose Content-Length is length (-1: unknown).
func (s setup) holdBatchOf(t *testing.T, cluster, token string, length int64) heldBatch {
	t.Helper()
	return s.holdBatchIn(t, "team-a", cluster, token, length)
}

// holdBatchIn is holdBatchOf for a Cluster in namespace.
func (s setup) holdBatchIn(t *testing.T, namespace, cluster, token string, length int64) heldBatch {
	t.Helper()
	r, w := io.Pipe()
	req := httptest.NewRequest(http.MethodPost, "/audit/"+namespace+"/"+cluster, r)
	req.Header.Set("Authorization", "Bearer "+token)
	req.ContentLength = length
	h := heldBatch{body: w, length: length, answer: make(chan *httptest.ResponseRecorder, 1)}
	go func() {
		rec := httptest.NewRecorder()
		s.receiver.ServeHTTP(rec, req)
		_ = r.Close() // a refused batch's body is not read
		h.answer <- rec
	}()
	// A pipe's write returns once the receiver has read it, or fails once
	// the receiver has answered without reading.
	if _, err := w.Write([]byte(" ")); err != nil {
		rec := <-h.answer
		t.Fatalf("a batch of %s was answered %d %q before its body was read", cluster, rec.Code, rec.Body.String())
	}
	return h
}

// finish sends the batch, padded with spaces to the length it was held with,
// and returns the receiver's answer.
func (h heldBatch) finish(batch []byte) *httptest.ResponseRecorder {
	if pad := h.length - 1 - int64(len(batch)); pad > 0 {
		batch = append(batch, bytes.Repeat([]byte{' '}, int(pad))...)
	}
	_, _ = h.body.Write(batch)
	_ = h.body.Close()
	return <-h.answer
}

func TestTheReceiverBoundsTheBatchesInFlight(t *testing.T) {
	s := newSetup(t)
	good := batch(event("ci", "X509SHA256="+fp("ab"), t0))
	expectRefused := func(w *httptest.ResponseRecorder, what string) {
		t.Helper()
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
			t.Fatalf("%s: answered %d %q with Retry-After %q, want 429 with a Retry-After", what, w.Code, w.Body.String(), w.Header().Get("Retry-After"))
		}
	}
	expectAccepted := func(w *httptest.ResponseRecorder, what string) {
		t.Helper()
		if w.Code != http.StatusOK {
			t.Fatalf("%s: answered %d %q, want 200", what, w.Code, w.Body.String())
		}
	}

	var prod []heldBatch
	for range MaxBatchesInFlightPerCluster {
		prod = append(prod, s.holdBatch(t, "prod", "s3cret"))
	}
	expectRefused(s.post(good), "a batch of a Cluster with as many in flight as it may have")
	if w := s.postTo("prod", "guess", good); w.Code != http.StatusUnauthorized {
		t.Fatalf("a batch with a wrong token, while prod has as many in flight as it may: answered %d, want 401 first", w.Code)
	}
	expectAccepted(s.postTo("staging", "other", batch()), "another Cluster's batch")
	expectAccepted(prod[0].finish(good), "a batch in flight")
	expectAccepted(s.post(good), "a batch of a Cluster that has one in flight fewer")

	// The bound of all Clusters: as many Clusters as it takes, each with as
	// many batches in flight as it may have, each in a namespace of its own.
	held := prod[1:]
	for i := 0; len(held) < MaxBatchesInFlight; i++ {
		namespace, name, token := fmt.Sprintf("team-c%d", i), fmt.Sprintf("c%d", i), fmt.Sprintf("token-%d", i)
		s.addToken(t, namespace, name, token)
		for j := 0; j < MaxBatchesInFlightPerCluster && len(held) < MaxBatchesInFlight; j++ {
			held = append(held, s.holdBatchIn(t, namespace, name, token, heldBatchLength))
		}
	}
	expectRefused(s.postTo("staging", "other", batch()), "a batch of a Cluster with none in flight, while all Clusters have as many as they may")
	for _, h := range held {
		expectAccepted(h.finish(batch()), "a batch in flight")
	}
	if n := s.receiver.inFlight.count(); n != 0 || len(s.receiver.inFlight.byCluster) != 0 || len(s.receiver.inFlight.byNamespace) != 0 {
		t.Fatalf("with every batch answered, %d are counted in flight: %v, %v", n, s.receiver.inFlight.byCluster, s.receiver.inFlight.byNamespace)
	}
}

// The Clusters of one namespace, whose tenant may create Clusters and so
// tokens, take at most three quarters of the batches and bytes in flight:
// the other namespaces' batches are still admitted.
func TestTheReceiverBoundsANamespacesBatchesInFlight(t *testing.T) {
	s := newSetup(t)
	good := batch(event("ci", "X509SHA256="+fp("ab"), t0))
	var held []heldBatch
	for i := 0; len(held) < MaxBatchesInFlightPerNamespace; i++ {
		name, token := fmt.Sprintf("b%d", i), fmt.Sprintf("token-%d", i)
		s.addToken(t, "team-b", name, token)
		for range MaxBatchesInFlightPerCluster {
			held = append(held, s.holdBatchIn(t, "team-b", name, token, heldBatchLength))
		}
	}
	s.addToken(t, "team-b", "more", "more-token")
	if w := s.postIn("team-b", "more", "more-token", good); w.Code != http.StatusTooManyRequests {
		t.Fatalf("a batch of a Cluster with none in flight, in a namespace with as many as it may have: answered %d, want 429", w.Code)
	}
	othersAdmittedWhileTeamBHolds := func(what string) {
		t.Helper()
		if w := s.post(good); w.Code != http.StatusOK {
			t.Fatalf("a batch of another namespace's Cluster%s: answered %d %q, want 200", what, w.Code, w.Body.String())
		}
		for _, h := range held {
			if w := h.finish(batch()); w.Code != http.StatusOK {
				t.Fatalf("a batch in flight: answered %d", w.Code)
			}
		}
	}
	othersAdmittedWhileTeamBHolds("")

	// Bytes: two bodies of unknown length (32 MiB each) of each of two of
	// its Clusters leave 22 MiB of the namespace's 150 (and 72 of all
	// Clusters'): no room for a third Cluster's body of unknown length.
	held = []heldBatch{s.holdBatchIn(t, "team-b", "b0", "token-0", -1), s.holdBatchIn(t, "team-b", "b0", "token-0", -1),
		s.holdBatchIn(t, "team-b", "b1", "token-1", -1), s.holdBatchIn(t, "team-b", "b1", "token-1", -1)}
	req := httptest.NewRequest(http.MethodPost, "/audit/team-b/more", strings.NewReader(""))
	req.Header.Set("Authorization", "Bearer more-token")
	req.ContentLength = -1
	w := httptest.NewRecorder()
	if s.receiver.ServeHTTP(w, req); w.Code != http.StatusTooManyRequests {
		t.Fatalf("a batch of unknown length of a Cluster with none in flight, in a namespace with 22 MiB left: answered %d, want 429", w.Code)
	}
	othersAdmittedWhileTeamBHolds(", bytes")
	if b := &s.receiver.inFlight; b.total != 0 || b.bytes != 0 || len(b.byNamespace) != 0 || len(b.bytesByNamespace) != 0 {
		t.Fatalf("with every batch answered, %d batches and %d bytes are counted in flight: %v, %v", b.total, b.bytes, b.byNamespace, b.bytesByNamespace)
	}
}

// TestTheReceiverBoundsTheBytesInFlight: the batches in flight reserve what
// reading and decoding them may take, a body of unknown length the most, and
// a batch that would take one Cluster's or all Clusters' bounds beyond them
// is refused, before its body is read or before it is decoded, while the
// count of batches is below its bounds.
func TestTheReceiverBoundsTheBytesInFlight(t *testing.T) {
	s := newSetup(t)
	// Each in a namespace of its own, so that only the Clusters' and all
	// Clusters' bounds apply.
	s.addToken(t, "team-b", "staging", "other")
	s.addToken(t, "team-c", "dev", "dev-token")
	good := batch(event("ci", "X509SHA256="+fp("ab"), t0))
	expect := func(w *httptest.ResponseRecorder, code int, what string) {
		t.Helper()
		if w.Code != code {
			t.Fatalf("%s: answered %d %q, want %d", what, w.Code, w.Body.String(), code)
		}
	}
	refused := func(namespace, cluster, token string, length int64) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/audit/"+namespace+"/"+cluster, strings.NewReader(""))
		req.Header.Set("Authorization", "Bearer "+token)
		req.ContentLength = length
		w := httptest.NewRecorder()
		s.receiver.ServeHTTP(w, req)
		return w
	}

	// Two bodies of unknown length (twice maxBatchBytes each) and one of 12
	// MiB (twice that) leave 12 MiB of one Cluster's bound: no room for a
	// third body of unknown length.
	prod := []heldBatch{s.holdBatchOf(t, "prod", "s3cret", -1), s.holdBatchOf(t, "prod", "s3cret", -1), s.holdBatchOf(t, "prod", "s3cret", 12<<20)}
	expect(refused("team-a", "prod", "s3cret", -1), http.StatusTooManyRequests, "a fourth batch of one Cluster, of unknown length")
	expect(s.post(good), http.StatusOK, "a small batch of the same Cluster")
	// Read, a body of many small events leaves no room to decode them.
	events := bytes.Repeat([]byte(`{},`), smallBatchObjects-10)
	many := append(append([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[`), events[:len(events)-1]...), `]}`...)
	expect(s.post(many), http.StatusTooManyRequests, "a batch whose events may take more than is left of the Cluster's bound")

	// All Clusters' bound: three more such bodies of another Cluster leave
	// 24 MiB of it.
	staging := []heldBatch{s.holdBatchIn(t, "team-b", "staging", "other", -1), s.holdBatchIn(t, "team-b", "staging", "other", -1),
		s.holdBatchIn(t, "team-b", "staging", "other", 12<<20)}
	expect(refused("team-c", "dev", "dev-token", maxBatchBytes), http.StatusTooManyRequests, "a batch of the largest size of a Cluster with none in flight, while the others hold all Clusters' bound")
	expect(s.postIn("team-c", "dev", "dev-token", batch()), http.StatusOK, "a small batch of a Cluster with none in flight")

	for _, h := range prod {
		expect(h.finish(good), http.StatusOK, "a batch in flight")
	}
	for _, h := range staging {
		expect(h.finish(batch()), http.StatusOK, "a batch in flight")
	}
	expect(s.postIn("team-c", "dev", "dev-token", many), http.StatusOK, "the batch of many events once nothing else is in flight")
	if b := &s.receiver.inFlight; b.bytes != 0 || len(b.bytesByCluster) != 0 || b.total != 0 {
		t.Fatalf("with every batch answered, %d bytes and %d batches are counted in flight: %v", b.bytes, b.total, b.bytesByCluster)
	}
}

// TestTheReceiverGivesABodyItsTime: a batch whose body does not arrive in
// time is answered, and leaves its place among the batches in flight.
func TestTheReceiverGivesABodyItsTime(t *testing.T) {
	s := newSetup(t)
	s.receiver.BodyTimeout = 100 * time.Millisecond
	server := httptest.NewServer(s.receiver)
	defer server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, w := io.Pipe()
	go func() {
		_, _ = w.Write([]byte(" ")) // and nothing more, until the test gives up
		<-ctx.Done()
		_ = w.CloseWithError(ctx.Err())
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, server.URL+"/audit/team-a/prod", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := server.Client().Do(req)
	if err != nil {
		t.Fatalf("a body that stops coming: %v, want an answer once its time is over", err)
	}
	answer, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(answer), "timeout") {
		t.Fatalf("a body that stops coming: answered %d %q, want 400 for its timeout", resp.StatusCode, answer)
	}
	if n := s.receiver.inFlight.count(); n != 0 {
		t.Fatalf("%d batches counted in flight once the slow one was answered", n)
	}
	if u := s.usage(t); u.Unrecorded == nil || u.Unrecorded.Before(s.clock.Now()) {
		t.Errorf("sightings left out until %v, want until the timeout at least (%v): the sender does not send a batch answered 400 again",
			u.Unrecorded, s.clock.Now())
	}
}

func TestCredentials(t *testing.T) {
	watch := event("operator", "X509SHA256="+fp("ee"), t0)
	watch.StageTimestamp = metav1.NewMicroTime(t0.Add(40 * time.Minute)) // a watch that ran for 40 minutes
	odd := event("bad\x1b[31mname", "X509SHA256="+fp("dd"), t0)
	got := credentialsOf(t, t0.Add(time.Hour), watch, odd, event("x", "X509SHA256=zz", t0), event("long", "X509SHA256="+fp("ab"), t0))
	if len(got) != 3 {
		t.Fatalf("got %+v, want the watch, the odd name and the long one (a malformed fingerprint dropped)", got)
	}
	if !got[0].FirstSeen.Equal(t0) || !got[0].LastSeen.Equal(t0.Add(40*time.Minute)) {
		t.Errorf("a long request counts as in use until its stage: %+v", got[0])
	}
	if got[1].User != "bad[31mname" {
		t.Errorf("control characters kept in %q", got[1].User)
	}
	long := event(strings.Repeat("é", 200), "X509SHA256="+fp("ab"), t0)
	if name := credentialsOf(t, t0, long)[0].User; len(name) > maxUserName || !utf8.ValidString(name) {
		t.Errorf("a long user name kept as %d bytes, valid UTF-8 %v", len(name), utf8.ValidString(name))
	}
}

// A sighting is taken as made when its batch arrived at the latest, and in
// the Unix epoch at the earliest, whatever the sender's clock says.
func TestSightingTimesAreWithinTheEpochAndTheArrival(t *testing.T) {
	epoch := time.Unix(0, 0)
	for _, tc := range []struct {
		name                string
		received, stage     time.Time
		wantFirst, wantLast time.Time
	}{
		{"on time", t0.Add(-time.Minute), t0.Add(-time.Second), t0.Add(-time.Minute), t0.Add(-time.Second)},
		{"a watch still open", t0.Add(-time.Hour), t0, t0.Add(-time.Hour), t0},
		{"a clock an hour ahead", t0.Add(time.Hour), t0.Add(time.Hour + time.Second), t0, t0},
		{"a stage ahead of the arrival", t0.Add(-time.Minute), t0.Add(time.Minute), t0.Add(-time.Minute), t0},
		{"past the year 2262", time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2300, 1, 1, 0, 0, 1, 0, time.UTC), t0, t0},
		{"before the year 1678", time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), t0.Add(-time.Second), epoch, t0.Add(-time.Second)},
		{"no times at all", time.Time{}, time.Time{}, epoch, epoch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := event("ci", "X509SHA256="+fp("cc"), tc.received)
			e.StageTimestamp = metav1.NewMicroTime(tc.stage)
			if tc.received.IsZero() {
				e.RequestReceivedTimestamp = metav1.MicroTime{}
			}
			got := credentialsOf(t, t0, e)
			if len(got) != 1 || !got[0].FirstSeen.Equal(tc.wantFirst) || !got[0].LastSeen.Equal(tc.wantLast) {
				t.Fatalf("got %+v, want first seen %v, last seen %v", got, tc.wantFirst, tc.wantLast)
			}
		})
	}
}

// A batch from an API server whose clock is ahead is recorded as seen when
// it arrived: the record does not look fresh after the events stop.
func TestTheReceiverRecordsNoSightingAheadOfItsArrival(t *testing.T) {
	s := newSetup(t)
	if w := s.post(batch(event("ci", "X509SHA256="+fp("cc"), arrival.Add(3*time.Hour)))); w.Code != http.StatusOK {
		t.Fatalf("answered %d %q", w.Code, w.Body.String())
	}
	if newest := s.usage(t).Newest(arrival.Add(24 * time.Hour)); !newest.Equal(arrival) {
		t.Fatalf("the record's newest sighting is %v, want the batch's arrival %v", newest, arrival)
	}
}

func TestTheReceiverRecordsClientCertificates(t *testing.T) {
	s := newSetup(t)
	w := s.post(batch(
		event("system:kube-scheduler", "X509SHA256="+strings.ToUpper(fp("aa01")), t0.Add(-2*time.Second)),
		event("system:kube-scheduler", "X509SHA256="+fp("aa01"), t0.Add(-time.Second)),
		event("system:serviceaccount:kube-system:default", "JTI=1234", t0),
		event("system:anonymous", "", t0),
		event("ci", "X509SHA256="+fp("cc"), t0),
	))
	if w.Code != http.StatusOK {
		t.Fatalf("answered %d %q", w.Code, w.Body.String())
	}
	u := s.usage(t)
	want := []oldca.Credential{
		{User: "ci", Fingerprint: fp("cc"), FirstSeen: t0, LastSeen: t0.Add(time.Millisecond)},
		{User: "system:kube-scheduler", Fingerprint: fp("aa01"), FirstSeen: t0.Add(-2 * time.Second), LastSeen: t0.Add(-time.Second + time.Millisecond)},
	}
	if len(u.Credentials) != len(want) {
		t.Fatalf("recorded %+v, want %+v", u.Credentials, want)
	}
	for i := range want {
		if got := u.Credentials[i]; got.User != want[i].User || got.Fingerprint != want[i].Fingerprint ||
			!got.FirstSeen.Equal(want[i].FirstSeen) || !got.LastSeen.Equal(want[i].LastSeen) {
			t.Errorf("credential %d = %+v, want %+v", i, got, want[i])
		}
	}
	if n := s.writes.Load(); n != 1 {
		t.Fatalf("%d writes for the first batch, want 1", n)
	}

	s.clock.Step(20 * time.Second)
	for _, after := range []time.Duration{20 * time.Second, 30 * time.Second} {
		if w := s.post(batch(event("ci", "X509SHA256="+fp("cc"), t0.Add(after)))); w.Code != http.StatusOK || s.writes.Load() != 1 {
			t.Fatalf("a client seen again within a minute: %d, %d writes, want 200 and no write yet", w.Code, s.writes.Load())
		}
	}
	s.clock.Step(time.Minute)
	gomega.NewWithT(t).Eventually(s.writes.Load).Should(gomega.BeEquivalentTo(2), "one more write a minute after the small advances")
	if got := s.usage(t).Credentials[0].LastSeen; !got.Equal(t0.Add(30*time.Second + time.Millisecond)) {
		t.Fatalf("lastSeen = %v, want the last sighting, +30s", got)
	}
	s.clock.Step(time.Minute)
	if w := s.post(batch(event("ci", "X509SHA256="+fp("cc"), t0.Add(150*time.Second)))); w.Code != http.StatusOK || s.writes.Load() != 3 {
		t.Fatalf("a client seen again two minutes later: %d, %d writes, want 200 and one more write at once", w.Code, s.writes.Load())
	}
	if got := s.usage(t).Credentials[0].LastSeen; !got.Equal(t0.Add(150*time.Second + time.Millisecond)) {
		t.Fatalf("lastSeen = %v, want +150s", got)
	}
}

// A replica that stops writes the sightings that wait for their minute, and
// from then on a batch's at once: kube-apiserver does not send again a batch
// answered 200.
func TestTheReceiverWritesWhatWaitsWhenItStops(t *testing.T) {
	s := newSetup(t)
	seen := func(after time.Duration) {
		t.Helper()
		if w := s.post(batch(event("ci", "X509SHA256="+fp("cc"), t0.Add(after)))); w.Code != http.StatusOK {
			t.Fatalf("answered %d %q", w.Code, w.Body.String())
		}
	}
	seen(0)
	s.clock.Step(20 * time.Second)
	seen(20 * time.Second)
	if n := s.writes.Load(); n != 1 {
		t.Fatalf("%d writes, want 1: the second sighting waits for its minute", n)
	}
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- s.receiver.Start(ctx) }()
	stop()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if n, got := s.writes.Load(), s.usage(t).Credentials[0].LastSeen; n != 2 || !got.Equal(t0.Add(20*time.Second+time.Millisecond)) {
		t.Fatalf("once stopped: %d writes, lastSeen %v; want 2 and the waiting sighting's, +20s", n, got)
	}
	seen(30 * time.Second)
	if n, got := s.writes.Load(), s.usage(t).Credentials[0].LastSeen; n != 3 || !got.Equal(t0.Add(30*time.Second+time.Millisecond)) {
		t.Fatalf("a batch after the stop: %d writes, lastSeen %v; want 3 and its sighting's, +30s", n, got)
	}
	// A write that fails then is answered 500: the API server sends the batch again.
	s.receiver.Client = interceptor.NewClient(s.client.(client.WithWatch), interceptor.Funcs{
		Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
			return apierrors.NewServiceUnavailable("etcd is away")
		},
	})
	if w := s.post(batch(event("ci", "X509SHA256="+fp("cc"), t0.Add(40*time.Second)))); w.Code != http.StatusInternalServerError {
		t.Fatalf("a batch after the stop whose write failed: answered %d %q, want 500", w.Code, w.Body.String())
	}
}

// A batch of events that carry their request bodies (a policy at the
// Request level) has more commas than a small batch may: it is decoded one
// event at a time, and its client certificates recorded all the same.
func TestTheReceiverRecordsTheClientCertificatesOfALargeBatch(t *testing.T) {
	s := newSetup(t)
	events := make([]auditv1.Event, 400)
	for i := range events {
		events[i] = event("system:node:worker-"+strconv.Itoa(i%20), "X509SHA256="+fp(fmt.Sprintf("%02x", i%20)), t0)
		events[i].Level = auditv1.LevelRequest
		events[i].RequestObject = &runtime.Unknown{Raw: []byte(`{"items":[` + strings.Repeat(`1,`, smallBatchCommas/len(events)) + `1]}`)}
	}
	body := batch(events...)
	if commas := bytes.Count(body, []byte{','}); commas < smallBatchCommas {
		t.Fatalf("the batch has %d commas, fewer than a large one", commas)
	}
	if w := s.post(body); w.Code != http.StatusOK {
		t.Fatalf("answered %d %q", w.Code, w.Body.String())
	}
	if got := s.usage(t).Credentials; len(got) != 20 {
		t.Fatalf("recorded %d client certificates, want the 20 in use", len(got))
	}
}

// metadataOnly reads ConfigMaps as the manager's cache holds the usage
// records: without their data.
type metadataOnly struct{ client.Reader }

func (m metadataOnly) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := m.Reader.Get(ctx, key, obj, opts...)
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		cm.Data, cm.BinaryData = nil, nil
	}
	return err
}

// TestTheReceiverReadsTheRecordPastTheCache: the manager's cache holds no
// usage record's data, so a batch is merged into the record as the API
// server holds it, and what it held stays.
func TestTheReceiverReadsTheRecordPastTheCache(t *testing.T) {
	s := newSetup(t)
	if w := s.post(batch(event("ci", "X509SHA256="+fp("cc"), t0))); w.Code != http.StatusOK {
		t.Fatalf("answered %d %q", w.Code, w.Body.String())
	}
	s.receiver.Reader = metadataOnly{s.client}
	if w := s.post(batch(event("deploy", "X509SHA256="+fp("dd"), t0))); w.Code != http.StatusOK {
		t.Fatalf("answered %d %q", w.Code, w.Body.String())
	}
	var users []string
	for _, c := range s.usage(t).Credentials {
		users = append(users, c.User)
	}
	if !slices.Equal(users, []string{"ci", "deploy"}) {
		t.Errorf("recorded users %v, want ci, recorded before, and deploy", users)
	}
}

// TestTheReceiverReadsTheLatestRecordAfterAConflict: a batch reads the
// record from the API server's watch cache first, which may be behind; its
// write then conflicts, and the next read is of the latest.
func TestTheReceiverReadsTheLatestRecordAfterAConflict(t *testing.T) {
	s := newSetup(t)
	if w := s.post(batch(event("ci", "X509SHA256="+fp("cc"), t0))); w.Code != http.StatusOK {
		t.Fatalf("answered %d %q", w.Code, w.Body.String())
	}
	var reads []string
	var conflicted bool
	s.receiver.APIReader = interceptor.NewClient(s.client.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				get := &client.GetOptions{}
				get.ApplyOptions(opts)
				rv := "latest"
				if get.Raw != nil && get.Raw.ResourceVersion != "" {
					rv = get.Raw.ResourceVersion
				}
				reads = append(reads, rv)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	s.receiver.Client = interceptor.NewClient(s.client.(client.WithWatch), interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if !conflicted {
				conflicted = true
				return apierrors.NewConflict(corev1.Resource("configmaps"), obj.GetName(), errors.New("the watch cache was behind"))
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	if w := s.post(batch(event("deploy", "X509SHA256="+fp("dd"), t0))); w.Code != http.StatusOK {
		t.Fatalf("answered %d %q", w.Code, w.Body.String())
	}
	if !slices.Equal(reads, []string{"0", "latest"}) {
		t.Errorf("the record was read at resource versions %v, want 0 (the watch cache), then the latest after the conflict", reads)
	}
	if n := len(s.usage(t).Credentials); n != 2 {
		t.Errorf("recorded %d credentials after the conflict, want 2", n)
	}
}

// TestTheReceiverReadsTheRecordOnlyWhenABatchMayChangeIt: while a Cluster
// has sightings waiting to be written, a batch that only advances known
// clients' lastSeen by less than a minute, or moves their firstSeen back (a
// late batch), is deferred without reading the record (which the manager's
// cache does not hold); the deferred write reads it, and so does a batch with
// a new client, or with nothing waiting.
func TestTheReceiverReadsTheRecordOnlyWhenABatchMayChangeIt(t *testing.T) {
	s := newSetup(t)
	reads := s.countRecordReads()
	post := func(events ...auditv1.Event) {
		t.Helper()
		if w := s.post(batch(events...)); w.Code != http.StatusOK {
			t.Fatalf("answered %d %q", w.Code, w.Body.String())
		}
	}
	post(event("ci", "X509SHA256="+fp("cc"), t0))
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads of the record for the first batch, want 1", n)
	}
	for _, after := range []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second} {
		post(event("ci", "X509SHA256="+fp("cc"), t0.Add(after)))
	}
	// None of them reads: the state stays a minute after the first batch's write.
	if n, w := reads.Load(), s.writes.Load(); n != 1 || w != 1 {
		t.Fatalf("after three batches that only advance lastSeen: %d reads, %d writes, want 1 and 1", n, w)
	}
	post(event("ci", "X509SHA256="+fp("cc"), t0.Add(-time.Second))) // first seen earlier: deferred too
	if n, w := reads.Load(), s.writes.Load(); n != 1 || w != 1 {
		t.Fatalf("after a batch with an earlier first sighting: %d reads, %d writes, want 1 and 1", n, w)
	}
	s.clock.Step(oldca.Resolution)
	gomega.NewWithT(t).Eventually(s.writes.Load).Should(gomega.BeEquivalentTo(2), "the deferred sightings written a minute later, in one write")
	if got := s.usage(t).Credentials[0]; !got.LastSeen.Equal(t0.Add(30*time.Second+time.Millisecond)) || !got.FirstSeen.Equal(t0.Add(-time.Second)) {
		t.Errorf("recorded %+v, want first seen -1s and last seen +30s", got)
	}
	before := reads.Load()
	post(event("deploy", "X509SHA256="+fp("dd"), t0.Add(40*time.Second)))
	if n := reads.Load() - before; n != 1 {
		t.Errorf("%d reads for a batch with a new client, want 1", n)
	}
}

// A sender chooses the times of its sightings: batches that each move a
// known client's first sighting back cost no write of their own, and what
// they moved is written a minute later, in one write.
// (Each earlier first sighting was written at once: a holder of the
// Cluster's audit token had the record, up to 768 KiB, written for every
// batch.)
func TestASenderCannotHaveTheRecordWrittenForEachBatch(t *testing.T) {
	s := newSetup(t)
	s.postSighting(t, 0)
	for i := range 100 {
		if w := s.post(batch(event("ci", "X509SHA256="+fp("cc"), t0.Add(-time.Duration(i+1)*time.Second)))); w.Code != http.StatusOK {
			t.Fatalf("answered %d %q", w.Code, w.Body.String())
		}
	}
	if w := s.writes.Load(); w != 1 {
		t.Fatalf("%d writes after a new client and 100 batches that each move its first sighting back, want 1", w)
	}
	s.clock.Step(oldca.Resolution)
	gomega.NewWithT(t).Eventually(s.writes.Load).Should(gomega.BeEquivalentTo(2), "what the batches moved written a minute later")
	if got := s.usage(t).Credentials[0].FirstSeen; !got.Equal(t0.Add(-100 * time.Second)) {
		t.Errorf("first seen %v, want the earliest sighting, %v", got, t0.Add(-100*time.Second))
	}
}

// TestTheReceiverReadsNoRecordInTheMinuteAfterItsWrite: the batches that
// follow a write of waiting sightings by less than a minute wait for the next
// one without a read, on what the receiver wrote; when no batch comes, the
// next look writes nothing and reads nothing.
func TestTheReceiverReadsNoRecordInTheMinuteAfterItsWrite(t *testing.T) {
	s := newSetup(t)
	reads := s.countRecordReads()
	g := gomega.NewWithT(t)
	// Each write of waiting sightings schedules a look a minute later:
	// step the clock once it has.
	nextMinute := func() {
		t.Helper()
		g.Eventually(s.clock.HasWaiters).Should(gomega.BeTrue(), "a look scheduled")
		s.clock.Step(oldca.Resolution)
	}
	s.postSighting(t, 0)              // a new client: read, written at once
	s.postSighting(t, 10*time.Second) // read: nothing known, left for later
	nextMinute()
	g.Eventually(s.writes.Load).Should(gomega.BeEquivalentTo(2), "the sighting left for later written")
	readsAfterWrite := reads.Load()
	s.postSighting(t, 65*time.Second) // 55 s after what was written: left for later, no read
	if n := reads.Load() - readsAfterWrite; n != 0 {
		t.Fatalf("%d reads for a batch in the minute after a write, want none", n)
	}
	nextMinute()
	g.Eventually(s.writes.Load).Should(gomega.BeEquivalentTo(3), "the sighting of that minute written")
	if got := s.usage(t).Credentials[0].LastSeen; !got.Equal(t0.Add(65*time.Second + time.Millisecond)) {
		t.Errorf("last seen %v, want %v", got, t0.Add(65*time.Second+time.Millisecond))
	}
	readsAfterWrite = reads.Load()
	nextMinute() // no batch in the minute: nothing to write
	g.Eventually(s.clustersHeld).Should(gomega.BeZero(), "the Cluster forgotten")
	if r, w := reads.Load()-readsAfterWrite, s.writes.Load(); r != 0 || w != 3 {
		t.Errorf("a look with nothing waiting: %d reads, %d writes in all; want none and 3", r, w)
	}
}

// TestTheReceiverReadsNothingForSightingsWrittenMeanwhile: sightings left
// for later that a batch with a change wrote in the meantime cost their
// flush no read and no write.
func TestTheReceiverReadsNothingForSightingsWrittenMeanwhile(t *testing.T) {
	s := newSetup(t)
	reads := s.countRecordReads()
	for _, after := range []time.Duration{0, 10 * time.Second} { // written, left for later
		s.postSighting(t, after)
	}
	// A new client: written at once, and with it the sighting left for later.
	if w := s.post(batch(event("ci", "X509SHA256="+fp("cc"), t0.Add(70*time.Second)), event("deploy", "X509SHA256="+fp("dd"), t0.Add(70*time.Second)))); w.Code != http.StatusOK {
		t.Fatalf("answered %d %q", w.Code, w.Body.String())
	}
	if w := s.writes.Load(); w != 2 {
		t.Fatalf("%d writes, want the first batch's and the third's", w)
	}
	readsBefore := reads.Load()
	g := gomega.NewWithT(t)
	g.Eventually(s.clock.HasWaiters).Should(gomega.BeTrue(), "a flush scheduled")
	s.clock.Step(oldca.Resolution)
	g.Eventually(s.clock.HasWaiters).Should(gomega.BeTrue(), "a look a minute after the flush")
	if r, w := reads.Load()-readsBefore, s.writes.Load(); r != 0 || w != 2 {
		t.Errorf("the flush of a sighting written meanwhile: %d reads, %d writes in all; want none and 2", r, w)
	}
}

// TestTheReceiverSaysItLostSightingsOfACredentialTheRecordDropped: a
// sighting left for later names its credential by digest only, so when the
// record no longer holds the credential at the write (it was started over
// meanwhile), the record says until when it lost sightings instead.
func TestTheReceiverSaysItLostSightingsOfACredentialTheRecordDropped(t *testing.T) {
	s := newSetup(t)
	for _, after := range []time.Duration{0, 10 * time.Second} { // written, left for later
		s.postSighting(t, after)
	}
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: "team-a", Name: credentials.CertificateUsageConfigMapName("prod")}
	if err := s.client.Get(context.Background(), key, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data[oldca.DataKey] = (&oldca.Usage{}).String()
	if err := s.client.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	writes := s.writes.Load()
	s.clock.Step(oldca.Resolution)
	gomega.NewWithT(t).Eventually(s.writes.Load).Should(gomega.BeNumerically(">", writes), "the flush writes")
	u := s.usage(t)
	if lost := t0.Add(10*time.Second + time.Millisecond); len(u.Credentials) != 0 || u.Unrecorded == nil || u.Unrecorded.Before(lost) {
		t.Errorf("the record holds %+v, lost sightings until %v; want nothing, and sightings lost until %v at least", u.Credentials, u.Unrecorded, lost)
	}
}

// TestTheReceiverStartsACorruptRecordOverAsUnrecorded: what a record that
// does not parse held is lost, and the record says so, so that the gate
// does not vouch for a rotation that started within the retention.
func TestTheReceiverStartsACorruptRecordOverAsUnrecorded(t *testing.T) {
	s := newSetup(t)
	if w := s.post(batch(event("ci", "X509SHA256="+fp("cc"), t0))); w.Code != http.StatusOK {
		t.Fatalf("answered %d %q", w.Code, w.Body.String())
	}
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: "team-a", Name: credentials.CertificateUsageConfigMapName("prod")}
	if err := s.client.Get(context.Background(), key, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data[oldca.DataKey] = "{"
	if err := s.client.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	s.clock.Step(10 * time.Second)
	// A new client: the receiver reads the record.
	if w := s.post(batch(event("deploy", "X509SHA256="+fp("dd"), t0.Add(10*time.Second)))); w.Code != http.StatusOK {
		t.Fatalf("answered %d %q", w.Code, w.Body.String())
	}
	u := s.usage(t)
	if u.Unrecorded == nil || !u.Unrecorded.Equal(s.clock.Now()) || len(u.Credentials) != 1 || u.Credentials[0].User != "deploy" {
		t.Fatalf("started over as %+v, unrecorded %v; want deploy recorded, and nothing known before %v", u.Credentials, u.Unrecorded, s.clock.Now())
	}
}

// A full record leaves new clients out and says until when; the batches
// that show only new clients within that time change nothing, and read it no
// more than the others: once a minute, not for every batch.
func TestTheReceiverReadsAFullRecordOnceAMinute(t *testing.T) {
	s := newSetup(t)
	s.postSighting(t, 0)
	ctx := context.Background()
	cm := &corev1.ConfigMap{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: credentials.CertificateUsageConfigMapName("prod")}, cm); err != nil {
		t.Fatal(err)
	}
	u := s.usage(t)
	// Clients of shorter names than the batches' fill it.
	var fillers []oldca.Credential
	for i := 0; len(fillers)*oldca.EntryBytes(u.Credentials[0]) < 2*oldca.MaxUsageBytes; i++ {
		fillers = append(fillers, oldca.Credential{User: fmt.Sprintf("f%04d", i), Fingerprint: fp("ff"), FirstSeen: t0, LastSeen: t0})
	}
	u.Observe(fillers, t0, 0)
	u.Unrecorded = nil
	cm.Data[oldca.DataKey] = u.String()
	if err := s.client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	reads, writes := s.countRecordReads(), s.writes.Load()
	newClient := func(i int, after time.Duration) {
		t.Helper()
		if w := s.post(batch(event(fmt.Sprintf("ci-%d", i), "X509SHA256="+fp(fmt.Sprintf("%02x", i)), t0.Add(after)))); w.Code != http.StatusOK {
			t.Fatalf("answered %d %q", w.Code, w.Body.String())
		}
	}
	newClient(0, 2*time.Minute)
	if n, w := reads.Load(), s.writes.Load()-writes; n != 1 || w != 1 {
		t.Fatalf("a new client of a full record: %d reads, %d writes, want 1 and 1 (left out until a minute later)", n, w)
	}
	for i := 1; i <= 10; i++ {
		newClient(i, 2*time.Minute+time.Duration(i)*time.Second)
	}
	if n, w := reads.Load(), s.writes.Load()-writes; n != 1 || w != 1 {
		t.Fatalf("ten more new clients within that minute: %d reads, %d writes, want 1 and 1", n, w)
	}
	if got := s.usage(t); got.Unrecorded == nil || !got.Unrecorded.Equal(t0.Add(3*time.Minute+time.Millisecond)) || len(got.Credentials) != len(u.Credentials) {
		t.Fatalf("the record holds %d credentials, unrecorded %v; want %d and a minute after the first new client", len(got.Credentials), got.Unrecorded, len(u.Credentials))
	}
	newClient(11, 4*time.Minute)
	if n, w := reads.Load(), s.writes.Load()-writes; n != 2 || w != 2 {
		t.Fatalf("a new client after that: %d reads, %d writes, want 2 and 2", n, w)
	}
}

// TestTheReceiverForgetsIdleClusters: the receiver keeps a Cluster's state
// only while sightings of it wait to be written, and for a minute after it
// read or wrote its record, so that a fleet whose Clusters come and go does
// not grow it.
func TestTheReceiverForgetsIdleClusters(t *testing.T) {
	s := newSetup(t)
	held := s.clustersHeld
	sighting := func(after time.Duration) []byte { return batch(event("ci", "X509SHA256="+fp("cc"), t0.Add(after))) }
	if w := s.post(sighting(0)); w.Code != http.StatusOK || held() != 1 {
		t.Fatalf("a batch written at once: %d, %d Clusters held, want 200 and the one, for the minute after the write", w.Code, held())
	}
	if w := s.post(sighting(20 * time.Second)); w.Code != http.StatusOK || held() != 1 {
		t.Fatalf("a sighting left for later: %d, %d Clusters held, want 200 and the one", w.Code, held())
	}
	s.clock.Step(time.Minute)
	g := gomega.NewWithT(t)
	g.Eventually(s.writes.Load).Should(gomega.BeEquivalentTo(2), "the sighting written a minute later")
	g.Eventually(s.clock.HasWaiters).Should(gomega.BeTrue(), "a look a minute after the write")
	if n := held(); n != 1 {
		t.Fatalf("%d Clusters held in the minute after a write, want the one", n)
	}
	s.clock.Step(time.Minute)
	g.Eventually(held).Should(gomega.BeZero(), "the Cluster forgotten once nothing of it waited for a minute")

	// A Cluster deleted while a sighting waits: its flush finds it gone and
	// drops the sighting, instead of trying again every minute for ever.
	if w := s.post(sighting(50 * time.Second)); w.Code != http.StatusOK || held() != 1 {
		t.Fatalf("a sighting left for later: %d, %d Clusters held, want 200 and the one", w.Code, held())
	}
	ctx := context.Background()
	usage := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: credentials.CertificateUsageConfigMapName("prod")}}
	for _, obj := range []client.Object{usage, &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}} {
		if err := s.client.Delete(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	s.clock.Step(time.Minute)
	g.Eventually(held).Should(gomega.BeZero(), "the deleted Cluster forgotten at its flush")
}

// TestTheReceiverKeepsSightingsOfConcurrentBatches: batches of one Cluster
// that arrive together, some written at once and some left for later, lose
// none of the sightings left for later.
func TestTheReceiverKeepsSightingsOfConcurrentBatches(t *testing.T) {
	s := newSetup(t)
	const n = 8
	user := func(i int) string { return fmt.Sprintf("u%d", i) }
	seen := func(i int, at time.Duration) []byte {
		return batch(event(user(i), "X509SHA256="+fp(fmt.Sprintf("%02x", i)), t0.Add(at)))
	}
	for i := range n {
		if w := s.post(seen(i, 0)); w.Code != http.StatusOK {
			t.Fatalf("first sighting: %d", w.Code)
		}
	}
	for round := 1; round <= 20; round++ {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { s.postUntilAdmitted(t, seen(i, time.Duration(round)*time.Second)) }) // left for later
			wg.Go(func() { s.postUntilAdmitted(t, seen(100*round+i, 0)) })                      // new: written at once
		}
		wg.Wait()
		s.clock.Step(time.Minute)
		gomega.NewWithT(t).Eventually(func() []string {
			var behind []string
			for _, c := range s.usage(t).Credentials {
				for i := range n {
					if c.User == user(i) && c.LastSeen.Before(t0.Add(time.Duration(round)*time.Second)) {
						behind = append(behind, c.User)
					}
				}
			}
			return behind
		}).Should(gomega.BeEmpty(), "round %d: sightings left for later and never written", round)
		users := map[string]bool{}
		for _, c := range s.usage(t).Credentials {
			users[c.User] = true
		}
		for i := range n {
			if !users[user(100*round+i)] {
				t.Errorf("round %d: the first sighting of %s, posted with the others, is not in the record", round, user(100*round+i))
			}
		}
	}
}

// A batch refused 400 or 413, which kube-apiserver does not send again,
// leaves its sightings out of the record: the gate does not vouch for what
// the receiver never read. A wrong token leaves nothing out.
func TestABatchRefusedForGoodLeavesItsSightingsOut(t *testing.T) {
	for _, tt := range []struct {
		name string
		body []byte
		code int
	}{
		{"larger than a batch may be", bytes.Repeat([]byte{' '}, maxBatchBytes+1), http.StatusBadRequest},
		{"not JSON", []byte(`{"kind":"EventList","items":[`), http.StatusBadRequest},
		{"not an EventList", []byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1"}`), http.StatusBadRequest},
		{"not UTF-8", []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"user":{"username":"` + strings.Repeat("\xff", 1<<10) + `"}}]}`),
			http.StatusBadRequest},
		{"too many events", []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` +
			strings.Repeat(`{"user":{}},`, maxEventsPerBatch) + `{"user":{}}]}`), http.StatusRequestEntityTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newSetup(t)
			if w := s.postTo("prod", "guess", tt.body); w.Code != http.StatusUnauthorized || s.writes.Load() != 0 {
				t.Fatalf("with a wrong token: answered %d, %d writes; want 401 and none", w.Code, s.writes.Load())
			}
			if w := s.post(tt.body); w.Code != tt.code {
				t.Fatalf("answered %d %q, want %d", w.Code, w.Body.String(), tt.code)
			}
			if u := s.usage(t); u.Unrecorded == nil || u.Unrecorded.Before(s.clock.Now()) {
				t.Errorf("sightings left out until %v, want until the refusal at least, %v", u.Unrecorded, s.clock.Now())
			}
			writes := s.writes.Load()
			s.clock.Step(30 * time.Second)
			if w := s.post(tt.body); w.Code != tt.code || s.writes.Load() != writes {
				t.Errorf("the same refusal half a minute later: answered %d, %d writes; want %d, none", w.Code, s.writes.Load()-writes, tt.code)
			}
		})
	}
}

// unrecordedSince is the usage record's Unrecorded, nil while there is none
// or no record.
func (s setup) unrecordedSince() *time.Time {
	cm := &corev1.ConfigMap{}
	if err := s.client.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: credentials.CertificateUsageConfigMapName("prod")}, cm); err != nil {
		return nil
	}
	u, err := oldca.Parse(cm.Data[oldca.DataKey])
	if err != nil {
		return nil
	}
	return u.Unrecorded
}

// kubeAPIServerPost posts body as kube-apiserver's audit webhook does, until
// ctx ends (its timeout, here short), and returns once it gave up or was
// answered; the handler's request context goes to requests.
func kubeAPIServerPost(ctx context.Context, t *testing.T, handler http.Handler, body io.Reader, requests chan<- context.Context) (*http.Response, error) {
	t.Helper()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if requests != nil {
			requests <- req.Context()
		}
		handler.ServeHTTP(w, req)
	}))
	t.Cleanup(server.Close)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, server.URL+"/audit/team-a/prod", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := server.Client().Do(req)
	if err == nil {
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	return resp, err
}

// A sender that gives up on a batch whose body has not all arrived
// (kube-apiserver's timeout, which it does not retry) leaves its sightings
// out of the record: the batch is not sent again.
func TestABatchItsSenderGaveUpOnIsLeftOut(t *testing.T) {
	s := newSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	body, w := io.Pipe()
	go func() {
		_, _ = w.Write([]byte(" ")) // and nothing more, until the sender gives up
		<-ctx.Done()
		_ = w.CloseWithError(ctx.Err())
	}()
	if _, err := kubeAPIServerPost(ctx, t, s.receiver, body, nil); err == nil {
		t.Fatal("a body that stops coming was answered before the sender gave up")
	}
	gomega.NewWithT(t).Eventually(s.unrecordedSince).ShouldNot(gomega.BeNil(), "the sightings of the batch given up on left out")
}

// A batch whose recording fails once its sender gave up (the management API
// server slower than the sender's timeout) is not sent again: its sightings
// are left out of the record, not lost without a word.
func TestABatchWhoseRecordingOutlastsItsSenderIsLeftOut(t *testing.T) {
	s := newSetup(t)
	requests := make(chan context.Context, 1)
	var creates atomic.Int32
	s.receiver.Client = interceptor.NewClient(s.client.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if creates.Add(1) == 1 {
				<-(<-requests).Done() // the sender gave up
				return errors.New("etcdserver: request timed out")
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	body := bytes.NewReader(batch(event("ci", "X509SHA256="+fp("cc"), t0)))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := kubeAPIServerPost(ctx, t, s.receiver, body, requests); err == nil {
		t.Fatal("answered before the sender gave up")
	}
	gomega.NewWithT(t).Eventually(s.unrecordedSince).ShouldNot(gomega.BeNil(), "the sightings of the batch whose recording failed left out")
}

// A batch refused for good whose leaving out cannot be recorded is answered
// 500, which its sender sends again, not 400, after which it never would.
func TestARefusedBatchIsAnswered500UntilItsLeavingOutIsRecorded(t *testing.T) {
	s := newSetup(t)
	var failing atomic.Bool
	failing.Store(true)
	s.receiver.Client = interceptor.NewClient(s.client.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if failing.Load() {
				return errors.New("etcdserver: request timed out")
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	if w := s.post([]byte(`{"kind":"EventList","items":[`)); w.Code != http.StatusInternalServerError {
		t.Fatalf("answered %d %q while the record cannot be written, want 500", w.Code, w.Body.String())
	}
	failing.Store(false)
	if w := s.post([]byte(`{"kind":"EventList","items":[`)); w.Code != http.StatusBadRequest || s.unrecordedSince() == nil {
		t.Fatalf("answered %d, unrecorded since %v, once the record can be written; want 400 and the sightings left out", w.Code, s.unrecordedSince())
	}
}
