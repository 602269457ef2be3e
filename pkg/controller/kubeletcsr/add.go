// Package kubeletcsr approves, denies, signs and cleans up the kubelet CSRs of
// every managed cluster Carousel is connected to. One controller, with one
// queue and one pool of workers, serves every connection: the clustercache
// adds a watch of each new connection's CSRs to it, and the watch ends with
// the connection. What it decides is package csr's to say.
package kubeletcsr

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/clustercache"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "kubelet-csr"

// Request is one CSR of one managed cluster.
type Request struct {
	// Cluster is the Cluster in the management cluster.
	Cluster client.ObjectKey
	// Name is the CSR's in the managed cluster.
	Name string
}

// Controllers handles the kubelet CSRs of every connection.
type Controllers struct {
	Management client.Reader // the management cluster (cached): CAs and Clusters
	Clock      clock.PassiveClock
	// MaxDuration caps the validity of the kubelet certificates Carousel signs.
	MaxDuration time.Duration
	// Concurrency is how many CSRs are decided and signed at once, across
	// the managed clusters; zero means DefaultConcurrency.
	Concurrency int
	Metrics     *Metrics
	// Recorder records the client certificates signed, for the old-CA
	// usage gate; nil records none.
	Recorder *Recorder
	// RequestTimeout bounds the handling of one CSR; zero means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration

	controller controller.TypedController[Request]
	mu         sync.Mutex
	clusters   map[client.ObjectKey]*connected
}

// connected is a managed cluster the controller handles the CSRs of: its
// reconciler, and its connection's lifetime and cache.
type connected struct {
	reconciler *csrReconciler
	ctx        context.Context // ends with the connection
	synced     func() bool     // the connection's CSRs are listed
}

// DefaultRequestTimeout bounds the handling of one CSR: reads from the
// cache, writes to the managed API server, the record of signed
// certificates. A managed API server that takes a request and never answers
// (etcd without quorum) would otherwise hold a worker, which every managed
// cluster shares, until its connection ends; the request is then retried
// with backoff.
const DefaultRequestTimeout = 2 * time.Minute

// notListedRetry is how long a request waits for its connection's CSRs to be
// listed, and then how soon it is looked at again: a read from an unlisted
// cache would hold a worker shared by every managed cluster until it is.
const notListedRetry = time.Second

// DefaultConcurrency is how many CSRs are handled at once unless
// Controllers says otherwise. A client certificate's worker waits for its
// Cluster's record to be written (Recorder), and the more wait, the larger
// each write's batch: in `make bench`, 500 kubelets joining at once took 36
// to 44 writes with 64 workers, 83 to 105 with 16 (and half the rate).
const DefaultConcurrency = 64

// listTimeout is how long a new connection gets to list its managed
// cluster's CSRs (controller-runtime's cache sync timeout) before it is
// dropped, and made again by the next Connect.
const listTimeout = 2 * time.Minute

// SetupWithManager registers the controller with mgr; connections add their
// watches to it (OnConnect).
func (cs *Controllers) SetupWithManager(mgr ctrl.Manager) error {
	logger := mgr.GetLogger().WithValues("controller", ControllerName)
	c, err := controller.NewTyped(ControllerName, mgr, controller.TypedOptions[Request]{
		Reconciler:              cs,
		MaxConcurrentReconciles: cmp.Or(cs.Concurrency, DefaultConcurrency),
		LogConstructor: func(req *Request) logr.Logger {
			if req == nil {
				return logger
			}
			return logger.WithValues("cluster", req.Cluster.String(), "certificatesigningrequest", req.Name)
		},
	})
	if err != nil {
		return err
	}
	cs.controller = c
	// A request left for an administrator is looked at again only when it
	// changes, or at its deletion a day later: a change of its Cluster's
	// approval policy queues its managed cluster's pending requests.
	return c.Watch(source.TypedKind(mgr.GetCache(), &v1alpha1.Cluster{}, handler.TypedFuncs[*v1alpha1.Cluster, Request]{UpdateFunc: cs.approvalChanged}))
}

// approvalChanged queues the pending requests of a Cluster whose CSR
// approval policy changed.
func (cs *Controllers) approvalChanged(ctx context.Context, e event.TypedUpdateEvent[*v1alpha1.Cluster], queue workqueue.TypedRateLimitingInterface[Request]) {
	if equality.Semantic.DeepEqual(e.ObjectOld.Spec.KubeletBootstrap.CSRApproval, e.ObjectNew.Spec.KubeletBootstrap.CSRApproval) {
		return
	}
	for _, req := range cs.pending(ctx, client.ObjectKeyFromObject(e.ObjectNew)) {
		queue.Add(req)
	}
}

// pending are the kubelet CSRs of key's managed cluster that are neither
// approved nor denied, as its connection's cache lists them; none while it
// has not listed them (its listing queues every request).
func (cs *Controllers) pending(ctx context.Context, key client.ObjectKey) []Request {
	cs.mu.Lock()
	c := cs.clusters[key]
	cs.mu.Unlock()
	if c == nil || !c.synced() {
		return nil
	}
	list := &certificatesv1.CertificateSigningRequestList{}
	if err := c.reconciler.remote.List(ctx, list); err != nil {
		log.FromContext(ctx).Error(err, "listing the pending kubelet CSRs of a Cluster whose approval policy changed", "cluster", key)
		return nil
	}
	var reqs []Request
	for _, obj := range list.Items {
		if ours(obj.Spec.SignerName) && !slices.ContainsFunc(obj.Status.Conditions, func(c certificatesv1.CertificateSigningRequestCondition) bool {
			return c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied
		}) {
			reqs = append(reqs, Request{Cluster: key, Name: obj.Name})
		}
	}
	return reqs
}

// Reconcile handles one CSR with the reconciler of its managed cluster, for
// no longer than the connection lives. A cluster no longer connected is
// skipped: its next connection lists, and so queues again, every CSR.
func (cs *Controllers) Reconcile(ctx context.Context, req Request) (reconcile.Result, error) {
	cs.mu.Lock()
	c := cs.clusters[req.Cluster]
	cs.mu.Unlock()
	if c == nil {
		return reconcile.Result{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(cs.RequestTimeout, DefaultRequestTimeout))
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()
	if !c.synced() {
		// A new connection lists its CSRs in moments; one that cannot is
		// ended by its own timeout, and must not hold the worker meanwhile.
		listing, stop := context.WithTimeout(ctx, notListedRetry)
		defer stop()
		if !toolscache.WaitForCacheSync(listing.Done(), c.synced) {
			return reconcile.Result{RequeueAfter: notListedRetry}, nil
		}
	}
	return c.reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: req.Name}})
}

// OnConnect is a clustercache.OnConnect: it has the controller handle the
// CSRs of the managed cluster of the Cluster key through conn, for as long as
// conn lives.
func (cs *Controllers) OnConnect(key client.ObjectKey, conn *clustercache.Connection) error {
	if cs.controller == nil {
		return errors.New("the kubelet CSR controller is not set up")
	}
	// Asking for the informer starts it without waiting for it to sync.
	informer, err := conn.Cluster.GetCache().GetInformer(context.Background(), &certificatesv1.CertificateSigningRequest{},
		cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	c := &connected{ctx: conn.Context(), synced: informer.HasSynced,
		reconciler: &csrReconciler{cluster: key, remote: conn.Cluster.GetClient(), informers: conn.Cluster.GetCache(), management: cs.Management, clock: cs.Clock,
			maxDuration: cs.MaxDuration, metrics: cs.Metrics, recorder: cs.Recorder}}
	cs.mu.Lock()
	if cs.clusters == nil {
		cs.clusters = map[client.ObjectKey]*connected{}
	}
	cs.clusters[key] = c
	cs.mu.Unlock()
	untrack := cs.trackBacklog(key, conn, informer.HasSynced)
	conn.Run(func(ctx context.Context) error {
		defer cs.forget(key, c)
		defer untrack()
		if err := cs.watch(ctx, key, conn); err != nil {
			return err
		}
		// A managed API server that is not up yet never lists the CSRs:
		// ending the connection has the next Connect make a new one.
		listing, cancel := context.WithTimeout(ctx, listTimeout)
		defer cancel()
		if !toolscache.WaitForCacheSync(listing.Done(), informer.HasSynced) {
			return fmt.Errorf("the managed cluster's CSRs were not listed within %s", listTimeout)
		}
		<-ctx.Done()
		return nil
	})
	return nil
}

// watch adds to the controller a watch of the connection's CSRs that ends
// when ctx (the connection's) does.
func (cs *Controllers) watch(ctx context.Context, key client.ObjectKey, conn *clustercache.Connection) error {
	csrs := source.TypedKind(conn.Cluster.GetCache(), &certificatesv1.CertificateSigningRequest{},
		handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, obj *certificatesv1.CertificateSigningRequest) []Request {
			return []Request{{Cluster: key, Name: obj.Name}}
		}))
	return cs.controller.Watch(source.TypedFunc[Request](func(controllerCtx context.Context, queue workqueue.TypedRateLimitingInterface[Request]) error {
		watchCtx, cancel := context.WithCancel(controllerCtx)
		context.AfterFunc(ctx, cancel)
		return csrs.Start(watchCtx, queue)
	}))
}

// forget stops handling the CSRs of key through c, unless a newer connection
// replaced it already.
func (cs *Controllers) forget(key client.ObjectKey, c *connected) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.clusters[key] == c {
		delete(cs.clusters, key)
	}
}

// trackBacklog reports the CSR backlog of the managed cluster from the
// connection's cache until the returned function is called.
func (cs *Controllers) trackBacklog(key client.ObjectKey, conn *clustercache.Connection, synced func() bool) (untrack func()) {
	clk := cs.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return cs.Metrics.trackBacklog(key, &backlogSource{reader: conn.Cluster.GetCache(), synced: synced, clock: clk})
}
