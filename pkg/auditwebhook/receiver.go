// Package auditwebhook receives the audit events of managed API servers, sent
// by their audit webhook backend (--audit-webhook-config-file, with the
// kubeconfig Carousel keeps in each Cluster's audit-webhook Secret), and
// records which client certificates they saw in use: the input of the
// old-CA usage gate (package oldca).
//
// Every replica of the manager serves it on the webhook server. Of a batch,
// only the fields of k8s.io/apiserver's audit types that say who made each
// request and when are decoded (eventList); they are reduced to the client
// certificates it shows (user and X509SHA256 credential ID), and merged
// into the Cluster's usage ConfigMap, which is written at once when a
// certificate is new or was seen a minute or more after it was last
// recorded, and otherwise a minute later, once for all of them. A replica
// reads and records a bounded number of batches at once, of each Cluster and
// of all (MaxBatchesInFlightPerCluster, MaxBatchesInFlight), and answers
// the rest 429, which the API server sends again.
package auditwebhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/oldca"
	"github.com/carousel-dev/carousel/pkg/promutil"
)

// PathPrefix is where the receiver is served: a Cluster's events go to
// PathPrefix + "<namespace>/<name>".
const PathPrefix = "/audit/"

// DataKeyToken is the key of the audit-webhook Secret that holds the bearer
// token the managed API server presents.
const DataKeyToken = "token"

// maxBatchBytes bounds a request's body; the API server's default batch
// (400 events) is well below it.
const maxBatchBytes = 16 << 20

// A batch decodes to more than its bytes: the shortest event ("{},") to some
// 30 times its size, so a batch of maxBatchBytes could take some 500 MiB at
// once. One of fewer than smallBatchCommas commas, which every array element
// and object member after the first of its array or object follows, and
// fewer than smallBatchObjects '{', which every object starts with (a comma
// or brace in a string only counts one too many), is decoded at once, each
// event's user.extra into a map (the fastest: BenchmarkReceiveBatch), to at
// most some 10 MiB besides its strings and the members of those maps, some
// 250 bytes each (decodeCost counts one for each ',' and '{'), so that the
// costliest fits one Cluster's bound (MaxBytesInFlightPerCluster):
// kube-apiserver's default batch, 400 events at the Metadata level, has some
// 10,000 commas and 3,000 braces. A larger one, such as a batch whose policy
// records request bodies, is decoded one event at a time, keeping of each user.extra, of at most
// maxExtraBytes, only the client-certificate IDs (largeEvents,
// credentialIDs), and refused with 413 past maxEventsPerBatch events
// (TestADecodedBatchHoldsLittleMoreThanItsEvents).
const (
	smallBatchCommas  = 40_000
	smallBatchObjects = 20_000
	maxEventsPerBatch = 10_000
)

// errTooManyEvents refuses a batch of more than maxEventsPerBatch events.
var errTooManyEvents = fmt.Errorf("a batch may hold at most %d events: send fewer at once (--audit-webhook-batch-max-size)", maxEventsPerBatch)

// bodies holds the buffers batches are read into: every managed API server
// sends one every few seconds, and json.Unmarshal copies what it keeps. A
// json.Decoder grew a new buffer for each batch: a batch of 400 allocated
// 1.6 MiB where it now allocates 0.6 MiB, and took 28% longer
// (BenchmarkReceiveBatch).
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putBody returns a buffer to bodies, unless an uncommonly large batch grew
// it: the pool would keep it between collections.
func putBody(b *bytes.Buffer) {
	if b.Cap() <= 4<<20 {
		b.Reset()
		bodies.Put(b)
	}
}

// The batches a replica reads and records at once are bounded: one Cluster's
// by MaxBatchesInFlightPerCluster, one namespace's by
// MaxBatchesInFlightPerNamespace, all of them by MaxBatchesInFlight, and the
// memory they may take (batchesInFlight.reserve) likewise. A holder of one
// Cluster's token can then take neither the memory nor the turns of the rest
// of the fleet, nor can a tenant who creates Clusters (and so tokens) in its
// namespace take more than three quarters of them: a fleet in one namespace
// keeps most of them, the other namespaces the rest. A batch beyond a bound
// is answered 429 Too Many Requests with
// Retry-After, which kube-apiserver's client honours (up to ten times) before
// its webhook backend backs off and starts over
// (--audit-webhook-initial-backoff). Its batch mode sends each batch when it
// is full or its wait is over, without waiting for the answer to the one
// before; the receiver answers in milliseconds, so a Cluster reaches the bound
// only when the receiver is slow, or a sender floods it.
const (
	MaxBatchesInFlightPerCluster   = 4
	MaxBatchesInFlightPerNamespace = MaxBatchesInFlight * 3 / 4
	MaxBatchesInFlight             = 32
	// MaxBytesInFlightPerCluster takes the costliest batch alone (some 99
	// MiB: maxBatchBytes of a body of unknown length, decoded an event at a
	// time, one event as large as the body), MaxBytesInFlight two of them; a
	// batch of 400 events at the Metadata level costs about 7 MiB.
	MaxBytesInFlightPerCluster   = 100 << 20
	MaxBytesInFlightPerNamespace = MaxBytesInFlight * 3 / 4
	MaxBytesInFlight             = 2 * MaxBytesInFlightPerCluster
)

// readCost is what reading a body of at most limit bytes may take: the
// buffer it is read into grows to at most twice that.
func readCost(limit int64) int64 { return 2 * limit }

// decodeCost is what decoding body, valid UTF-8, may take besides the body:
// its strings, at most twice its size (a string with an escape is unquoted
// into a buffer of its length, then copied), and its events, at most one a
// '{': a small batch's fewer than smallBatchObjects, each with its
// user.extra's map (some 300 bytes, and a smallEvent and an auditEvent, 160),
// and that map's members, at most one a ',' or '{' (some 250 bytes each,
// with the tables the map outgrows: a sender may make them all one event's
// extra),
// a large one's at most maxEventsPerBatch (an auditEvent); each twice while
// their slice grows. A large batch's decoder also holds the event it reads,
// in a buffer up to twice as large, and the decoder of its user.extra
// (credentialIDs) a buffer of up to twice maxExtraBytes and the string it
// reads. Besides, 64 KiB for the decoder's own (large allocations are
// rounded up to whole pages). Invalid UTF-8 would cost more: each byte of it
// becomes a 3-byte U+FFFD; the receiver refuses it.
func decodeCost(body []byte) int64 {
	const perSmallEvent, perSmallMember, perLargeEvent, decoder = 512, 256, int64(unsafe.Sizeof(auditEvent{})), 64 << 10
	if commas, objects := batchShape(body); commas < smallBatchCommas && objects < smallBatchObjects {
		return 2*int64(len(body)) + 2*objects*perSmallEvent + (commas+objects)*perSmallMember + decoder
	}
	return 4*int64(len(body)) + 2*maxEventsPerBatch*perLargeEvent + 4*maxExtraBytes + decoder
}

// defaultBodyTimeout is kube-apiserver's timeout of a request of its audit
// webhook: a batch it sends arrives within it.
const defaultBodyTimeout = 30 * time.Second

// retryAfter is the Retry-After of a batch refused for the bounds, in seconds.
const retryAfter = "1"

// x509CredentialPrefix starts the credential ID of a client certificate.
const x509CredentialPrefix = "X509SHA256="

// Receiver is the http.Handler of the audit webhook.
type Receiver struct {
	// Reader reads the audit-webhook Secrets (the manager's cache holds them:
	// they carry carousel.dev/cluster).
	Reader client.Reader
	// APIReader reads past the cache: the Cluster, which a shard's cache may
	// not hold, and the usage ConfigMaps, whose data the manager's cache does
	// not hold (a record grows with the clients of the managed cluster), when
	// a batch may change them (knownSightings).
	APIReader client.Reader
	// Client writes the usage ConfigMaps.
	Client client.Client
	// Clock tells the time of a merge; one with delayed execution (a fake
	// clock) also runs the delayed writes, which otherwise use real time.
	Clock clock.PassiveClock
	// Requests counts the requests by answer; nil counts nothing.
	Requests *prometheus.CounterVec
	// BodyTimeout bounds the reading of an admitted batch's body; zero is
	// defaultBodyTimeout.
	BodyTimeout time.Duration

	// mu guards states: one merge at a time per Cluster in a replica. A
	// Cluster's state is dropped once nobody uses it, nothing of it is left
	// to write and no flush is scheduled (one is, for a minute after each
	// write), so a fleet whose Clusters come and go does not fill it.
	mu     sync.Mutex
	states map[client.ObjectKey]*clusterState

	inFlight batchesInFlight

	// stopped: the replica stops (Start returned), and waits for no minute
	// to write what a batch defers.
	stopped atomic.Bool
}

// Start implements manager.Runnable, on every replica (NeedLeaderElection):
// once ctx is done, it writes each Cluster's sightings that wait for their
// minute, and from then on a batch's at once, so that a replica that stops
// (a rolling update, a drained node) does not lose what it answered 200 for.
// A crash still loses the sightings of up to a minute.
func (r *Receiver) Start(ctx context.Context) error {
	<-ctx.Done()
	r.stopped.Store(true)
	r.mu.Lock()
	keys := slices.Collect(maps.Keys(r.states))
	r.mu.Unlock()
	// Within the manager's grace period (30 s by default), a few at once.
	flushing, cancel := context.WithTimeout(context.Background(), stopFlushTimeout)
	defer cancel()
	var g errgroup.Group
	g.SetLimit(stopFlushes)
	for _, key := range keys {
		g.Go(func() error {
			st := r.lock(key)
			defer r.unlock(key, st)
			_ = r.flushLocked(flushing, key, st) // logged
			return nil
		})
	}
	return g.Wait()
}

// What a stopping replica gives the writes of what waits.
const (
	stopFlushTimeout = 20 * time.Second
	stopFlushes      = 8
)

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica
// receives batches.
func (r *Receiver) NeedLeaderElection() bool { return false }

// batchesInFlight counts the batches being read and recorded, and the bytes
// they reserved, by Cluster and by namespace.
type batchesInFlight struct {
	mu               sync.Mutex
	total            int
	byCluster        inFlightBy[client.ObjectKey]
	byNamespace      inFlightBy[string]
	bytes            int64
	bytesByCluster   inFlightBy[client.ObjectKey]
	bytesByNamespace inFlightBy[string]
}

// inFlightBy counts what is in flight by a key; a key at zero is dropped.
type inFlightBy[K comparable] map[K]int64

func (m *inFlightBy[K]) add(k K, n int64) {
	if *m == nil {
		*m = inFlightBy[K]{}
	}
	if (*m)[k] += n; (*m)[k] == 0 {
		delete(*m, k)
	}
}

// admit counts a batch of key's in, unless that would exceed a bound.
func (b *batchesInFlight) admit(key client.ObjectKey) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.total >= MaxBatchesInFlight || b.byCluster[key] >= MaxBatchesInFlightPerCluster || b.byNamespace[key.Namespace] >= MaxBatchesInFlightPerNamespace {
		return false
	}
	b.total++
	b.byCluster.add(key, 1)
	b.byNamespace.add(key.Namespace, 1)
	return true
}

// reserve counts n more bytes of an admitted batch of key's in, unless that
// would exceed a bound.
func (b *batchesInFlight) reserve(key client.ObjectKey, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bytes+n > MaxBytesInFlight || b.bytesByCluster[key]+n > MaxBytesInFlightPerCluster ||
		b.bytesByNamespace[key.Namespace]+n > MaxBytesInFlightPerNamespace {
		return false
	}
	b.bytes += n
	b.bytesByCluster.add(key, n)
	b.bytesByNamespace.add(key.Namespace, n)
	return true
}

// done counts an admitted batch of key's out, with the bytes it reserved.
func (b *batchesInFlight) done(key client.ObjectKey, reserved int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total--
	b.byCluster.add(key, -1)
	b.byNamespace.add(key.Namespace, -1)
	b.bytes -= reserved
	b.bytesByCluster.add(key, -reserved)
	b.bytesByNamespace.add(key.Namespace, -reserved)
}

// NewRequestsCounter is the receiver's request counter, by HTTP status code.
func NewRequestsCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	return promutil.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "carousel_audit_webhook_requests_total",
		Help: "Batches of audit events received from managed API servers, by the HTTP status code of the answer.",
	}, []string{"code"}))
}

// ServeHTTP receives one batch of a Cluster's audit events.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	code, msg := r.serve(w, req)
	if r.Requests != nil {
		r.Requests.WithLabelValues(fmt.Sprint(code)).Inc()
	}
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", retryAfter)
	}
	if code != http.StatusOK {
		http.Error(w, msg, code)
		return
	}
	w.WriteHeader(code)
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) (int, string) {
	if req.Method != http.MethodPost {
		return http.StatusMethodNotAllowed, "POST a batch of audit events (audit.k8s.io/v1 EventList)"
	}
	namespace, name, ok := strings.Cut(strings.TrimPrefix(req.URL.Path, PathPrefix), "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return http.StatusNotFound, "the path is " + PathPrefix + "<namespace>/<cluster>"
	}
	key := client.ObjectKey{Namespace: namespace, Name: name}
	ctx := log.IntoContext(req.Context(), log.FromContext(req.Context()).WithValues("cluster", key))
	if code, msg := r.authenticate(ctx, key, req.Header.Get("Authorization")); code != http.StatusOK {
		return code, msg
	}
	const tooMuch = "too many batches of this Cluster, of its namespace, or of all Clusters, at once, or too large ones; send it again"
	if !r.inFlight.admit(key) {
		return http.StatusTooManyRequests, tooMuch
	}
	var reserved int64
	defer func() { r.inFlight.done(key, reserved) }()
	reserve := func(n int64) bool {
		ok := r.inFlight.reserve(key, n)
		if ok {
			reserved += n
		}
		return ok
	}
	limit := int64(maxBatchBytes)
	if req.ContentLength >= 0 {
		limit = min(limit, req.ContentLength)
	}
	if !reserve(readCost(limit)) {
		return http.StatusTooManyRequests, tooMuch
	}
	// A body sent slowly would keep its place among the batches in flight.
	// Where the connection cannot take a deadline (a test's recorder) there
	// is none.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(cmp.Or(r.BodyTimeout, defaultBodyTimeout)))
	body := bodies.Get().(*bytes.Buffer)
	defer putBody(body)
	// A batch refused with 400 or 413 is not sent again: its sightings are
	// left out of the record. Until that is recorded, the batch is answered
	// 500, which the sender sends again.
	refusedForGood := func(code int, msg string) (int, string) {
		if err := r.leftOut(ctx, key); err != nil {
			return http.StatusInternalServerError, "recording that the audit events are left out failed; send them again"
		}
		return code, msg
	}
	if _, err := body.ReadFrom(http.MaxBytesReader(nil, req.Body, limit)); err != nil {
		// Too large, too slow, or its sender went away: kube-apiserver
		// does not send again a batch whose request it gave up on (after
		// its own timeout), nor one answered 400.
		return refusedForGood(http.StatusBadRequest, "reading the audit events: "+err.Error())
	}
	if !utf8.Valid(body.Bytes()) { // kube-apiserver sends JSON, which is UTF-8
		return refusedForGood(http.StatusBadRequest, "the audit events are not valid UTF-8")
	}
	if !reserve(decodeCost(body.Bytes())) {
		return http.StatusTooManyRequests, tooMuch
	}
	batch, err := decodeBatch(body.Bytes())
	switch {
	case errors.Is(err, errTooManyEvents):
		return refusedForGood(http.StatusRequestEntityTooLarge, err.Error())
	case err != nil:
		return refusedForGood(http.StatusBadRequest, "decoding the audit events: "+err.Error())
	}
	if gv := auditv1.SchemeGroupVersion.String(); batch.APIVersion != gv || batch.Kind != "EventList" {
		return refusedForGood(http.StatusBadRequest, fmt.Sprintf("expected an EventList of %s, got a %s of %s", gv, batch.Kind, batch.APIVersion))
	}
	seen := credentialsIn(batch.Items, r.Clock.Now())
	if len(seen) == 0 {
		return http.StatusOK, ""
	}
	// Recorded even when the sender gives up meanwhile (its timeout ends the
	// request's context): it does not send the batch again then.
	recordCtx, cancel := beyondTheRequest(ctx)
	defer cancel()
	if err := r.record(recordCtx, key, seen); err != nil {
		log.FromContext(ctx).Error(err, "recording the client certificates of audit events")
		if ctx.Err() != nil {
			return refusedForGood(http.StatusInternalServerError, "recording the audit events failed")
		}
		return http.StatusInternalServerError, "recording the audit events failed; send them again"
	}
	return http.StatusOK, ""
}

// authenticate checks the bearer token against the Cluster's audit-webhook
// Secret. A Cluster without one answers as a wrong token does.
func (r *Receiver) authenticate(ctx context.Context, key client.ObjectKey, header string) (int, string) {
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || token == "" {
		return http.StatusUnauthorized, "a bearer token is required"
	}
	secret := &corev1.Secret{}
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: credentials.AuditWebhookSecretName(key.Name)}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return http.StatusUnauthorized, "the token is not valid for this Cluster"
	case err != nil:
		log.FromContext(ctx).Error(err, "reading the audit-webhook Secret")
		return http.StatusInternalServerError, "reading the Cluster's audit-webhook Secret failed"
	}
	want := secret.Data[DataKeyToken]
	if len(want) == 0 || secret.Labels[v1alpha1.LabelCluster] != key.Name || subtle.ConstantTimeCompare(want, []byte(token)) != 1 {
		return http.StatusUnauthorized, "the token is not valid for this Cluster"
	}
	return http.StatusOK, ""
}

// eventList is what the receiver reads of an audit.k8s.io/v1 EventList:
// its type and, of each event, the fields of auditEvent, under the JSON names
// of auditv1.EventList (FuzzDecodingMatchesTheAuditTypes). The rest of each
// event (its request URI, object reference, source IPs, user agent, groups,
// response status, annotations) is skipped, not allocated: a batch of 400
// takes 27% less time and 31% less memory than as an auditv1.EventList
// (BenchmarkReceiveBatch), and a skipped field is not checked. Each managed
// API server sends at least an event for every request it serves.
type eventList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []auditEvent `json:"items"`
}

// decodeBatch decodes a batch at once when it is small (smallBatchCommas,
// smallBatchObjects), else one event at a time.
func decodeBatch(body []byte) (eventList, error) {
	if !isSmallBatch(body) {
		return decodeLargeBatch(body)
	}
	return decodeSmallBatch(body)
}

func decodeSmallBatch(body []byte) (eventList, error) {
	var small struct {
		metav1.TypeMeta `json:",inline"`
		Items           []smallEvent `json:"items"`
	}
	err := json.Unmarshal(body, &small)
	batch := eventList{TypeMeta: small.TypeMeta, Items: make([]auditEvent, len(small.Items))}
	for i, e := range small.Items {
		batch.Items[i] = auditEvent{RequestReceivedTimestamp: e.RequestReceivedTimestamp, StageTimestamp: e.StageTimestamp}
		batch.Items[i].User.Username, batch.Items[i].User.Extra = e.User.Username, keptCredentialIDs(e.User.Extra[user.CredentialIDKey])
	}
	return batch, err
}

// isSmallBatch: body has fewer than smallBatchCommas commas and
// smallBatchObjects braces.
func isSmallBatch(body []byte) bool {
	commas, objects := batchShape(body)
	return commas < smallBatchCommas && objects < smallBatchObjects
}

// batchShape counts body's commas and '{'.
func batchShape(body []byte) (commas, objects int64) {
	return int64(bytes.Count(body, []byte{','})), int64(bytes.Count(body, []byte{'{'}))
}

// smallEvent is an event of a small batch as it is decoded: its user.extra
// whole, as auditv1's map.
type smallEvent struct {
	User struct {
		Username string              `json:"username"`
		Extra    map[string][]string `json:"extra"`
	} `json:"user"`
	RequestReceivedTimestamp metav1.MicroTime `json:"requestReceivedTimestamp"`
	StageTimestamp           metav1.MicroTime `json:"stageTimestamp"`
}

func decodeLargeBatch(body []byte) (eventList, error) {
	var large struct {
		metav1.TypeMeta `json:",inline"`
		Items           largeEvents `json:"items"`
	}
	err := json.Unmarshal(body, &large)
	return eventList{TypeMeta: large.TypeMeta, Items: large.Items}, err
}

// largeEvents are the events of a large batch, decoded one at a time: at
// most maxEventsPerBatch, else errTooManyEvents.
type largeEvents []auditEvent

func (e *largeEvents) UnmarshalJSON(data []byte) error {
	dec, null, err := openJSON(data, '[', reflect.TypeFor[largeEvents]())
	if err != nil || null {
		*e = nil
		return err
	}
	// As json.Unmarshal does for a slice, the events of an earlier "items"
	// (a key given twice) are decoded into, not replaced.
	earlier := *e
	items := earlier[:0]
	for dec.More() {
		if len(items) == maxEventsPerBatch {
			return errTooManyEvents
		}
		var ev auditEvent
		if i := len(items); i < len(earlier) {
			ev = earlier[i]
		}
		if err := dec.Decode(&ev); err != nil {
			return err
		}
		items = append(items, ev)
	}
	*e = items
	return nil
}

// credentialIDs is what an event of a large batch keeps of its user.extra:
// the client-certificate IDs (x509CredentialPrefix and a SHA-256 in hex, all
// credentialsIn reads) among the values of its credential ID key
// (user.CredentialIDKey), the first maxCredentialIDs distinct ones; the key
// matched exactly and the last of duplicates kept, as auditv1's map does,
// and kept from an earlier "extra" of the same user (a key given twice) that
// had them when a later one has not, as decoding into that map does. It is
// read a token at a time: kube-apiserver sends one ID, and a sender's array
// of millions of empty strings would otherwise take 16 bytes a string for
// every 3 bytes of the batch, past what the batch reserved (decodeCost).
type credentialIDs []string

// maxCredentialIDs bounds the client-certificate IDs an event keeps.
const maxCredentialIDs = 8

// maxExtraBytes bounds the user.extra of an event of a large batch, which
// its decoder reads into a buffer of its own: kube-apiserver's authenticators
// put a few short values there.
const maxExtraBytes = 256 << 10

// errExtraTooLarge refuses a large batch with an event whose user.extra
// takes more than maxExtraBytes.
var errExtraTooLarge = fmt.Errorf("an event's user.extra may take at most %d bytes in a batch decoded an event at a time", maxExtraBytes)

func (c *credentialIDs) UnmarshalJSON(data []byte) error {
	if len(data) > maxExtraBytes {
		return fmt.Errorf("%w (it takes %d)", errExtraTooLarge, len(data))
	}
	typ := reflect.TypeFor[map[string][]string]()
	dec, null, err := openJSON(data, '{', typ)
	if err != nil || null {
		*c = nil
		return err
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return err
		}
		ids, err := readCredentialIDs(dec, key == user.CredentialIDKey, typ)
		if err != nil {
			return err
		}
		if key == user.CredentialIDKey {
			*c = ids
		}
	}
	_, err = dec.Token() // '}'
	return err
}

// readCredentialIDs reads an array of strings, or null, from dec; when keep,
// it returns the client-certificate IDs among them (see credentialIDs).
func readCredentialIDs(dec *json.Decoder, keep bool, typ reflect.Type) (credentialIDs, error) {
	switch tok, err := dec.Token(); {
	case err != nil:
		return nil, err
	case tok == nil:
		return nil, nil
	case tok != json.Delim('['):
		return nil, &json.UnmarshalTypeError{Value: fmt.Sprintf("%v", tok), Type: typ}
	}
	var ids credentialIDs
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		id, ok := tok.(string)
		if !ok && tok != nil {
			return nil, &json.UnmarshalTypeError{Value: fmt.Sprintf("%v", tok), Type: typ}
		}
		if keep {
			ids.keep(id)
		}
	}
	_, err := dec.Token() // ']'
	return ids, err
}

// keptCredentialIDs are the credential IDs an event keeps of values, the
// values of its credential ID key (see credentialIDs).
func keptCredentialIDs(values []string) credentialIDs {
	var ids credentialIDs
	for _, id := range values {
		ids.keep(id)
	}
	return ids
}

// keep adds id if it is a client-certificate ID not kept yet, and fewer
// than maxCredentialIDs are.
func (c *credentialIDs) keep(id string) {
	if fingerprint, x509 := strings.CutPrefix(id, x509CredentialPrefix); x509 && isHex(fingerprint) &&
		len(*c) < maxCredentialIDs && !slices.Contains(*c, id) {
		*c = append(*c, id)
	}
}

// openJSON reads the first token of data, an array or object (open is '['
// or '{') that a value of typ decodes, or null, and returns the decoder of
// the rest.
func openJSON(data []byte, open json.Delim, typ reflect.Type) (dec *json.Decoder, null bool, err error) {
	dec = json.NewDecoder(bytes.NewReader(data))
	switch tok, err := dec.Token(); {
	case err != nil:
		return nil, false, err
	case tok == nil:
		return nil, true, nil
	case tok != open:
		return nil, false, &json.UnmarshalTypeError{Value: fmt.Sprintf("%v", tok), Type: typ}
	}
	return dec, false, nil
}

// auditEvent is what the receiver reads of an audit event: who made the request,
// and when it was received and reached the event's stage.
type auditEvent struct {
	User struct {
		Username string        `json:"username"`
		Extra    credentialIDs `json:"extra"`
	} `json:"user"`
	RequestReceivedTimestamp metav1.MicroTime `json:"requestReceivedTimestamp"`
	StageTimestamp           metav1.MicroTime `json:"stageTimestamp"`
}

// credentialsIn are the client certificates events show in use, one per user
// and fingerprint, with the first and last time each request was received.
// The times are the sender's; each is taken as now at the latest (the batch
// has arrived, whatever the sender's clock says) and the Unix epoch at the
// earliest. A time ahead of now would make the record look fresh after the
// audit events stopped (oldca.Silence), and one outside the years 1678–2262
// would wrap as the sightings are kept, in Unix nanoseconds.
func credentialsIn(events []auditEvent, now time.Time) []oldca.Credential {
	type id struct{ user, fingerprint string }
	byID := map[id]*oldca.Credential{}
	var out []*oldca.Credential
	for i := range events {
		e := &events[i]
		// A long request (a watch) was in use from when it was received to
		// the stage the event reports.
		first, last := e.RequestReceivedTimestamp.Time, e.StageTimestamp.Time
		if first.IsZero() || (!last.IsZero() && last.Before(first)) {
			first = last
		}
		if last.Before(first) {
			last = first
		}
		first, last = sightingTime(first, now), sightingTime(last, now)
		name := userName(e.User.Username)
		for _, cred := range e.User.Extra {
			fingerprint, ok := strings.CutPrefix(cred, x509CredentialPrefix)
			if !ok || !isHex(fingerprint) || name == "" {
				continue
			}
			k := id{name, strings.ToLower(fingerprint)}
			c, found := byID[k]
			if !found {
				c = &oldca.Credential{User: k.user, Fingerprint: k.fingerprint, FirstSeen: first, LastSeen: last}
				byID[k] = c
				out = append(out, c)
			}
			if first.Before(c.FirstSeen) {
				c.FirstSeen = first
			}
			if last.After(c.LastSeen) {
				c.LastSeen = last
			}
		}
	}
	creds := make([]oldca.Credential, len(out))
	for i, c := range out {
		creds[i] = *c
	}
	return creds
}

// sightingTime is t, no earlier than the Unix epoch and no later than now.
func sightingTime(t, now time.Time) time.Time {
	if t.After(now) {
		return now
	}
	if epoch := time.Unix(0, 0); t.Before(epoch) {
		return epoch
	}
	return t
}

// clusterState is what a replica holds for one Cluster between batches.
type clusterState struct {
	// users is how many merges use or wait for it; guarded by Receiver.mu.
	users int

	mu sync.Mutex
	// pending are the sightings whose lastSeen advanced by less than
	// oldca.Resolution, or whose firstSeen moved back; they are written when
	// the scheduled flush comes, which after a write schedules the next one a
	// minute later.
	pending        pendingSightings
	flushScheduled bool
	// known is what the record held when it was last read or written
	// through this state; nil after a failure.
	known *knownSightings
}

// lock returns key's state, locked, created when there is none.
func (r *Receiver) lock(key client.ObjectKey) *clusterState {
	r.mu.Lock()
	st := r.states[key]
	if st == nil {
		if r.states == nil {
			r.states = map[client.ObjectKey]*clusterState{}
		}
		st = &clusterState{}
		r.states[key] = st
	}
	st.users++
	r.mu.Unlock()
	st.mu.Lock()
	return st
}

// unlock unlocks key's state st, and drops it when it was the last user and
// st holds nothing to write. It decides under both locks: a user that came
// in meanwhile may have queued sightings. (lock never holds Receiver.mu
// while it waits for a state's.)
func (r *Receiver) unlock(key client.ObjectKey, st *clusterState) {
	r.mu.Lock()
	if st.users--; st.users == 0 && len(st.pending) == 0 && !st.flushScheduled {
		delete(r.states, key)
	}
	r.mu.Unlock()
	st.mu.Unlock()
}

// maxUserName bounds a user name taken from an audit event: the sender
// holds a token of its Cluster, and the name goes into the Cluster's status.
const maxUserName = 253

// userName is name without control characters, at most maxUserName bytes.
func userName(name string) string {
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, name)
	if len(name) > maxUserName {
		name = strings.ToValidUTF8(name[:maxUserName], "")
	}
	return name
}

// isHex: a SHA-256 in hex, as the API server writes a credential ID.
func isHex(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// record merges seen into the Cluster's usage ConfigMap, writing it only
// when the record changed; small advances of lastSeen, and earlier
// firstSeens, are written oldca.Resolution later, in one write. A batch of
// nothing but such moves of sightings the state knows waits for that write
// without reading the record.
func (r *Receiver) record(ctx context.Context, key client.ObjectKey, seen []oldca.Credential) error {
	st := r.lock(key)
	defer r.unlock(key, st)
	if moves, ok := st.known.deferred(seen, oldca.Resolution); ok {
		// What Observe would defer, without reading the record.
		st.pending.add(moves)
	} else {
		deferred, err := r.mergeRetrying(ctx, key, st, func(u *oldca.Usage, now time.Time) (bool, []oldca.Credential) {
			return u.Observe(seen, now, oldca.Resolution)
		})
		if err != nil {
			return err
		}
		st.pending.add(deferred)
	}
	switch {
	case len(st.pending) > 0 && r.stopped.Load():
		// Answered 500 when the write fails: the API server sends it again,
		// to a replica that stays.
		return r.flushLocked(ctx, key, st)
	case !st.flushScheduled && (len(st.pending) > 0 || st.known != nil):
		// The state, with what it now knows of the record, stays until the
		// flush a minute later: the batches of that minute that would change
		// nothing (a full record's new clients among them) read nothing.
		st.flushScheduled = true
		r.flushLater(key)
	}
	return nil
}

// leftOut records that a batch of key's was refused, 400 or 413, which its
// sender does not send again: the sightings it held, up to now, are left
// out of the record (oldca.Usage.Unrecorded), so that the gate does not
// vouch for what it never saw. The record says so a minute ahead
// (oldca.Resolution): a sender that keeps sending such batches has it
// written once a minute, not for each. A failure is logged and returned: the
// batch is then answered 500, which the sender sends again.
func (r *Receiver) leftOut(ctx context.Context, key client.ObjectKey) error {
	// The sender may be gone, and the request's context with it.
	ctx, cancel := beyondTheRequest(ctx)
	defer cancel()
	st := r.lock(key)
	defer r.unlock(key, st)
	_, err := r.mergeRetrying(ctx, key, st, func(u *oldca.Usage, now time.Time) (bool, []oldca.Credential) {
		return u.LeaveOut(now, now, oldca.Resolution), nil
	})
	if err != nil {
		log.FromContext(ctx).Error(err, "recording that a refused batch's client certificates are left out")
	}
	return err
}

// flush writes a Cluster's pending sightings; after a failure it tries again
// oldca.Resolution later, unless the Cluster is gone, whose sightings no gate
// needs. The state is kept while a flush is scheduled: after a write, one
// more comes oldca.Resolution later, so that what the state knows of the
// record it wrote lets the batches of that minute wait without a read; the
// flush that finds nothing waiting lets the state go.
func (r *Receiver) flush(key client.ObjectKey) {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	st := r.lock(key)
	defer r.unlock(key, st)
	_ = r.flushLocked(ctx, key, st) // logged, and tried again a minute later
}

// flushTimeout bounds a scheduled flush.
const flushTimeout = 30 * time.Second

// beyondTheRequest is ctx (its values, the logger among them) without the
// request's end, bounded as a flush is: a write for a batch whose sender
// gave up is still made.
func beyondTheRequest(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
}

// flushLocked is flush of key's state st, which the caller holds locked. It
// returns the error of a write that failed.
func (r *Receiver) flushLocked(ctx context.Context, key client.ObjectKey, st *clusterState) error {
	if len(st.pending) == 0 {
		st.flushScheduled = false
		return nil
	}
	if st.known.holds(st.pending) {
		// A batch that changed the record wrote them meanwhile.
		st.pending = nil
		r.flushLater(key)
		return nil
	}
	write := func(u *oldca.Usage, now time.Time) (bool, []oldca.Credential) {
		seen, lost := st.pending.in(u)
		changed, _ := u.Observe(seen, now, 0)
		if !lost.IsZero() {
			changed = u.LeaveOut(lost, now, 0) || changed
		}
		return changed, nil
	}
	if _, err := r.mergeRetrying(ctx, key, st, write); err != nil {
		if apierrors.IsNotFound(r.APIReader.Get(ctx, key, &v1alpha1.Cluster{})) {
			st.pending, st.flushScheduled = nil, false
			return nil
		}
		log.FromContext(ctx).Error(err, "writing the client certificates seen in use", "cluster", key)
		r.flushLater(key)
		return err
	}
	st.pending = nil
	r.flushLater(key)
	return nil
}

// flushLater flushes key's sightings oldca.Resolution from now, by r.Clock
// when it can run functions later (the real one can, and a fake one in
// tests), else by the real clock.
func (r *Receiver) flushLater(key client.ObjectKey) {
	clk, ok := r.Clock.(clock.WithDelayedExecution)
	if !ok {
		clk = clock.RealClock{}
	}
	clk.AfterFunc(oldca.Resolution, func() { go r.flush(key) }) // a fake clock calls it while it holds its lock
}

// mergeRetrying merges seen into the record, reading it again after a
// conflict. The first read is served from the API server's watch cache
// (resourceVersion "0"), which costs it no read of etcd but may be behind.
// That is safe: the record only grows (its entries are added, their
// lastSeen moves on) until they expire, so what a stale read already holds
// the latest holds too, and a write based on it conflicts and reads the
// latest.
// st.known becomes what the record holds once written, nil after a failure.
func (r *Receiver) mergeRetrying(ctx context.Context, key client.ObjectKey, st *clusterState, observe observeFunc) ([]oldca.Credential, error) {
	read := []client.GetOption{&client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}}}
	var deferred []oldca.Credential
	var usage *oldca.Usage
	err := credentials.WriteRecord(func() (err error) {
		deferred, usage, err = r.merge(ctx, key, observe, read...)
		read = nil // the latest, after a conflict
		return err
	})
	st.known = nil
	if err == nil {
		st.known = knownFrom(usage)
	}
	return deferred, err
}

// observeFunc merges sightings into a record, as oldca.Usage.Observe does:
// it says whether the record changed, and returns what it deferred.
type observeFunc func(u *oldca.Usage, now time.Time) (changed bool, deferred []oldca.Credential)

// merge merges sightings into the record with observe and returns what it
// deferred and what the record now holds.
func (r *Receiver) merge(ctx context.Context, key client.ObjectKey, observe observeFunc, read ...client.GetOption) ([]oldca.Credential, *oldca.Usage, error) {
	now := r.Clock.Now()
	cm := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: credentials.CertificateUsageConfigMapName(key.Name)}, cm, read...)
	if apierrors.IsNotFound(err) {
		usage, err := r.create(ctx, key, observe, now)
		return nil, usage, err
	}
	if err != nil {
		return nil, nil, err
	}
	usage, err := oldca.Parse(cm.Data[oldca.DataKey])
	if err != nil {
		// What it held is lost: the gate does not vouch for a rotation
		// that started within the retention of now.
		log.FromContext(ctx).Info("the usage record does not parse; starting it over", "error", err.Error())
		usage = &oldca.Usage{Unrecorded: &now}
	}
	changed, deferred := observe(usage, now)
	if !changed {
		return deferred, usage, nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[oldca.DataKey] = usage.String()
	return nil, usage, r.Client.Update(ctx, cm) // carries the resourceVersion read: a conflict reads again
}

// create creates the record of what observe merges into an empty one, and
// returns what it holds.
func (r *Receiver) create(ctx context.Context, key client.ObjectKey, observe observeFunc, now time.Time) (*oldca.Usage, error) {
	cluster := &v1alpha1.Cluster{}
	if err := r.APIReader.Get(ctx, key, cluster); err != nil {
		return nil, fmt.Errorf("reading the Cluster: %w", err)
	}
	if !cluster.DeletionTimestamp.IsZero() {
		return nil, errors.New("the Cluster is being deleted")
	}
	usage := &oldca.Usage{}
	observe(usage, now) // nothing to defer: every sighting is new
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace, Name: credentials.CertificateUsageConfigMapName(key.Name),
			Labels: map[string]string{v1alpha1.LabelCluster: key.Name},
		},
		Data: map[string]string{oldca.DataKey: usage.String()},
	}
	if err := controllerutil.SetControllerReference(cluster, cm, r.Client.Scheme()); err != nil {
		return nil, err
	}
	return usage, r.Client.Create(ctx, cm)
}
