// Package clustercache keeps Carousel's connections to the managed clusters
// it can reach, one per Cluster, in the manner of Cluster API's clustercache:
// Connect (re)connects with Carousel's own client certificate, Client hands
// a connection's client to whoever needs one, Disconnect and Stop end them,
// and OnConnect hooks start what runs per managed cluster (the watch of its
// kubelet CSRs) for exactly as long as its connection lives.
package clustercache

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// The rate limit of each connection unless Cache sets one. A CSR costs two
// writes (approval, then certificate): 500 writes/s lets Carousel sign the
// CSRs of hundreds of kubelets a second, and the managed API server's own
// priority and fairness still protects it.
const (
	DefaultQPS   = 500
	DefaultBurst = 1000
)

// DefaultRequestTimeout bounds each request of a connection's direct client
// unless Cache sets another bound: a managed API server that takes a request
// and never answers (etcd without quorum, a proxy holding the connection)
// would otherwise hold the worker that sent it for ever. It is a little
// longer than kube-apiserver's own default --request-timeout (60s), whose
// answer says more.
const DefaultRequestTimeout = 70 * time.Second

// ErrNotIssued means the Cluster controller has not issued the trust bundle
// or Carousel's client certificate yet; their creation brings the caller back.
var ErrNotIssued = errors.New("the managed cluster's credentials are not issued yet")

// OnConnect is called for every new connection, before Connect returns it.
// What it starts with Connection.Run stops with the connection.
type OnConnect func(key client.ObjectKey, conn *Connection) error

// Cache holds the connections. Its zero value is not usable: set Management
// and Scheme. Add it to the manager so that every connection ends with it.
type Cache struct {
	// Management reads the Cluster's trust bundle and Carousel's client
	// certificate in the management cluster.
	Management client.Reader
	Scheme     *runtime.Scheme
	OnConnect  []OnConnect
	// QPS and Burst limit the requests of each connection to its managed
	// API server (one client-go token bucket for all of them); zero means
	// DefaultQPS and DefaultBurst.
	QPS   float32
	Burst int
	// RequestTimeout bounds each request of a connection's Client; zero
	// means DefaultRequestTimeout. The cache's watches are not bounded.
	RequestTimeout time.Duration
	// Clock times the probes of a managed API server that stopped
	// answering; nil means the real clock.
	Clock clock.PassiveClock

	mu    sync.Mutex
	conns map[client.ObjectKey]*Connection
	// stopped: the manager stopped (Start returned); a connect still in
	// flight then ends its connection rather than keep it.
	stopped bool
	// connecting serialises the connects and disconnects of one Cluster, so
	// that the last connection made is the one kept, and the one its hooks
	// saw last, and a Disconnect ends a connect in flight too.
	connecting keyLocks
}

// keyLocks holds a mutex per key for as long as someone holds or waits for
// it, so that the keys of Clusters long gone cost nothing.
type keyLocks struct {
	mu    sync.Mutex
	locks map[client.ObjectKey]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int // holding or waiting
}

// lock locks key's mutex and returns what unlocks it.
func (l *keyLocks) lock(key client.ObjectKey) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[client.ObjectKey]*keyLock{}
	}
	kl := l.locks[key]
	if kl == nil {
		kl = &keyLock{}
		l.locks[key] = kl
	}
	kl.users++
	l.mu.Unlock()
	kl.Lock()
	return func() {
		kl.Unlock()
		l.mu.Lock()
		if kl.users--; kl.users == 0 {
			delete(l.locks, key)
		}
		l.mu.Unlock()
	}
}

// Connection is one managed cluster: a cache of what the kubelet CSR
// controller reads there (CacheOptions), and a direct client.
type Connection struct {
	// Config is what the connection was made with.
	Config *rest.Config
	// Cluster's cache holds what CacheOptions says, and no more: read
	// anything else through Client.
	Cluster cluster.Cluster
	// Client reads and writes the managed cluster without the cache, each
	// request bounded by Cache.RequestTimeout.
	Client client.Client

	digest string
	ctx    context.Context
	cancel context.CancelFunc
	drop   func()
	log    logr.Logger // the connect's, with the endpoint
}

// Context ends when the connection does.
func (conn *Connection) Context() context.Context { return conn.ctx }

// Run runs start in the background until the connection ends. A start that
// fails while the connection is live (a cache that never synced: the API
// server was not up yet, or too slow to list) ends the connection, logged
// with its error, and the next Connect makes a new one.
func (conn *Connection) Run(start func(context.Context) error) {
	go func() {
		if err := start(conn.ctx); err != nil && conn.ctx.Err() == nil {
			conn.log.Error(err, "ending the connection to the managed cluster: what runs with it failed; the next pass connects again")
			conn.drop()
		}
	}()
}

// Connect returns the connection to a Cluster's managed cluster, (re)making
// it when what it connects with changed: Carousel's client certificate is
// renewed during a rotation, the cluster CA bundle changes, the endpoint
// moves. When the endpoint moved, or the bundle no longer holds a CA the
// connection trusts (a rotation's completion dropped the old cluster CA), the
// connection ends whether or not the new one can be made: it would go on
// taking for the managed cluster whatever the old endpoint or CA vouches for.
// Everything it reads lives in the Cluster's namespace, which a tenant may
// write, so the connection is built from data only (see
// credentials.RESTConfig), never from the operator Secret's kubeconfig.
func (c *Cache) Connect(ctx context.Context, cl *v1alpha1.Cluster) (*Connection, error) {
	key, endpoint := client.ObjectKeyFromObject(cl), cl.Spec.ControlPlane.Endpoint
	// When no new connection can be configured (the bundle or the operator
	// Secret is missing or lost its label, an endpoint the webhook would
	// have refused, a bundle that does not parse), the old one ends all the
	// same when it no longer goes where, or (the bundle read) trusts what,
	// the Cluster says.
	endMoved := func(caBundle []byte) {
		unlock := c.connecting.lock(key)
		c.disconnectMoved(key, endpoint, caBundle)
		unlock()
	}
	bundle := &corev1.ConfigMap{}
	if err := c.Management.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: credentials.BundleConfigMapName(cl.Name, v1alpha1.CARoleCluster)}, bundle); err != nil {
		if apierrors.IsNotFound(err) {
			endMoved(nil)
			return nil, ErrNotIssued
		}
		return nil, err
	}
	caBundle := []byte(bundle.Data[v1alpha1.DataKeyCABundle])
	operator := &corev1.Secret{}
	if err := c.Management.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: credentials.CertificateSecretName(cl.Name, credentials.CertOperator)}, operator); err != nil {
		if apierrors.IsNotFound(err) {
			endMoved(caBundle)
			return nil, ErrNotIssued
		}
		return nil, err
	}
	cfg, err := credentials.RESTConfig(endpoint, caBundle, operator.Data[v1alpha1.DataKeyCertificate], operator.Data[v1alpha1.DataKeyPrivateKey])
	if err != nil {
		endMoved(caBundle)
		return nil, fmt.Errorf("the managed cluster's client configuration: %w", err)
	}
	return c.connect(ctx, key, cfg)
}

func (c *Cache) connect(ctx context.Context, key client.ObjectKey, cfg *rest.Config) (*Connection, error) {
	digest := configDigest(cfg)
	defer c.connecting.lock(key)()
	c.mu.Lock()
	existing := c.conns[key]
	c.mu.Unlock()
	if existing != nil && existing.digest == digest && existing.ctx.Err() == nil {
		return existing, nil
	}
	c.disconnectMoved(key, cfg.Host, cfg.CAData)
	conn, err := c.start(ctx, key, cfg, digest)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		conn.cancel()
		return nil, errStopped
	}
	if conn.ctx.Err() != nil { // dropped before it was kept (see drop)
		c.mu.Unlock()
		return nil, errEndedAtStart
	}
	if c.conns == nil {
		c.conns = map[client.ObjectKey]*Connection{}
	}
	old := c.conns[key]
	c.conns[key] = conn
	c.mu.Unlock()
	if old != nil {
		old.cancel()
	}
	log.FromContext(ctx).Info("connected to the managed cluster", "endpoint", cfg.Host)
	return conn, nil
}

// disconnectMoved ends key's connection when it goes to another endpoint
// than host, or trusts a CA that the bundle caData does not hold (see
// Connect); a nil caData is a bundle not known, by which nothing ends. The
// caller holds key's connecting lock.
func (c *Cache) disconnectMoved(key client.ObjectKey, host string, caData []byte) {
	c.mu.Lock()
	existing := c.conns[key]
	c.mu.Unlock()
	if existing != nil && (existing.Config.Host != host || (caData != nil && dropsTrust(existing.Config.CAData, caData))) {
		c.disconnectLocked(key)
	}
}

// dropsTrust says whether the PEM bundle next lacks a certificate of the
// bundle trusted, or either does not parse.
func dropsTrust(trusted, next []byte) bool {
	if len(trusted) == 0 {
		return false
	}
	before, err := pki.ParseBundle(trusted)
	if err != nil {
		return true
	}
	after, err := pki.ParseBundle(next)
	if err != nil {
		return true
	}
	return slices.ContainsFunc(before, func(c *x509.Certificate) bool { return !after.Contains(c) })
}

// configDigest identifies what a connection was made with.
func configDigest(cfg *rest.Config) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(cfg.Host), cfg.CAData, cfg.CertData, cfg.KeyData} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (c *Cache) start(ctx context.Context, key client.ObjectKey, cfg *rest.Config, digest string) (*Connection, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = c.QPS, c.Burst
	if cfg.QPS == 0 {
		cfg.QPS = DefaultQPS
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultBurst
	}
	// One bucket for the connection: client-go makes one for each REST client
	// of a config without a RateLimiter, and controller-runtime makes a REST
	// client for each kind, its cache's and discovery's.
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	if err := reachable(ctx, cfg, httpClient); err != nil {
		return nil, err
	}
	cl, err := cluster.New(cfg, func(o *cluster.Options) {
		o.Scheme = c.Scheme
		o.HTTPClient = httpClient
		o.Cache = CacheOptions()
		// Unstructured reads of the cluster's client go to the API server:
		// the CSR approver reads the address pins, a Node's latest addresses
		// and whether a bootstrap token is gone that way (a pin is decided
		// once, a request deleted once, never on a stale read).
		o.Client.Cache = &client.CacheOptions{Unstructured: false}
		o.MapperProvider = restMapper
	})
	if err != nil {
		return nil, err
	}
	// The direct client shares the cluster's transport and REST mapper: one
	// connection pool per managed cluster, and one discovery of its API
	// server should a kind outside managedKinds ever need one. Its requests,
	// unlike the cache's watches, are bounded, and once the API server left
	// one unanswered they wait for a probe (breaker), which ends well
	// before the request it holds up so that the request fails with the
	// probe's error.
	timeout := cmp.Or(c.RequestTimeout, DefaultRequestTimeout)
	bounded := &http.Client{Timeout: timeout,
		Transport: newBreaker(cl.GetHTTPClient().Transport, cfg.Host, cmp.Or[clock.PassiveClock](c.Clock, clock.RealClock{}), min(timeout/2, reachTimeout))}
	direct, err := client.New(cfg, client.Options{Scheme: c.Scheme, HTTPClient: bounded, Mapper: cl.GetRESTMapper()})
	if err != nil {
		return nil, err
	}
	logger := log.FromContext(ctx).WithValues("endpoint", cfg.Host)
	ctx, cancel := context.WithCancel(context.Background())
	conn := &Connection{Config: cfg, Cluster: cl, Client: direct, digest: digest, ctx: ctx, cancel: cancel, log: logger}
	conn.drop = func() { c.drop(key, conn) }
	conn.Run(cl.Start)
	for _, hook := range c.OnConnect {
		if err := hook(key, conn); err != nil {
			cancel()
			return nil, err
		}
	}
	return conn, nil
}

// reachTimeout bounds how long a connect waits for the managed API server
// to answer.
const reachTimeout = 10 * time.Second

// reachable asks the managed API server for its version. A connect to one
// that does not answer, or refuses Carousel's certificate, fails at once and
// its caller retries it with backoff; otherwise the connection's informers
// would retry on their own until their cache gave up syncing. (Mapping the
// first kind through discovery used to fail it the same way.)
func reachable(ctx context.Context, cfg *rest.Config, httpClient *http.Client) error {
	d, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	if err := d.RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return fmt.Errorf("reaching the managed API server at %s: %w", cfg.Host, err)
	}
	return nil
}

// CacheOptions is what a connection caches of its managed cluster: what the
// kubelet CSR controller reads on every request. Each connection's cache
// lives as long as the connection, one per managed cluster, so it holds as
// little as that controller needs:
//   - CertificateSigningRequests, whole but for their managedFields;
//   - Carousel's bootstrap token Secrets in kube-system (labelled
//     carousel.dev/bootstrap-token), not the namespace's other Secrets;
//   - Nodes, with their name, UID, labels, annotations and
//     status.addresses only: not their images, conditions or spec, which
//     make up most of a Node.
func CacheOptions() cache.Options {
	carouselTokens, err := labels.NewRequirement(v1alpha1.LabelBootstrapToken, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Namespaces: map[string]cache.Config{metav1.NamespaceSystem: {}},
				Label: labels.NewSelector().Add(*carouselTokens)},
			&corev1.Node{}: {Transform: nodeIdentity},
		},
	}
}

// nodeIdentity keeps of a Node what identifies it to the CSR approver: its
// metadata (without managedFields) and addresses.
func nodeIdentity(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil // a tombstone
	}
	kept := &corev1.Node{TypeMeta: node.TypeMeta, ObjectMeta: node.ObjectMeta,
		Status: corev1.NodeStatus{Addresses: node.Status.Addresses}}
	kept.ManagedFields = nil
	return kept, nil
}

// Client returns the direct client of a Cluster's managed cluster when
// Carousel is connected to it at the Cluster's endpoint: a connection to the
// endpoint it had before is the kubelet bootstrap controller's to end
// (Connect), and nothing else may take what that address says for the
// managed cluster meanwhile.
func (c *Cache) Client(cl *v1alpha1.Cluster) (client.Client, bool) {
	conn, ok := c.Connection(client.ObjectKeyFromObject(cl))
	if !ok || conn.Config.Host != cl.Spec.ControlPlane.Endpoint {
		return nil, false
	}
	return conn.Client, true
}

// Connection returns the live connection to a Cluster's managed cluster.
func (c *Cache) Connection(key client.ObjectKey) (*Connection, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	conn, ok := c.conns[key]
	return conn, ok
}

// Disconnect ends the connection to a managed cluster, if there is one,
// and one a connect in flight makes.
func (c *Cache) Disconnect(key client.ObjectKey) {
	defer c.connecting.lock(key)()
	c.disconnectLocked(key)
}

// disconnectLocked is Disconnect with key's lock held.
func (c *Cache) disconnectLocked(key client.ObjectKey) {
	c.mu.Lock()
	conn := c.conns[key]
	delete(c.conns, key)
	c.mu.Unlock()
	if conn != nil {
		conn.cancel()
	}
}

// drop ends conn and forgets it, unless it was replaced already. It ends it
// first: a connect that has not kept conn yet sees it ended and keeps it not
// (errEndedAtStart); one that kept it has, when drop looks.
func (c *Cache) drop(key client.ObjectKey, conn *Connection) {
	conn.cancel()
	c.mu.Lock()
	if c.conns[key] == conn {
		delete(c.conns, key)
	}
	c.mu.Unlock()
}

var (
	// errStopped: the manager stopped while a connection was being made.
	errStopped = errors.New("the manager is stopping")
	// errEndedAtStart: what runs with a connection failed (logged) before
	// the connect kept it.
	errEndedAtStart = errors.New("the connection ended as it was made: what runs with it failed (logged); the next pass connects again")
)

// Start implements manager.Runnable: it ends every connection when the
// manager stops, and any a connect in flight makes then.
func (c *Cache) Start(ctx context.Context) error {
	<-ctx.Done()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	for key, conn := range c.conns {
		conn.cancel()
		delete(c.conns, key)
	}
	return nil
}
