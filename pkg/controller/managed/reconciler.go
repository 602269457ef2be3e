// Package managed is the controller that works inside each managed cluster
// whose API server Carousel can reach: it keeps the kubelet TLS-bootstrapping
// objects there (bootstrap tokens, RBAC, cluster-info), publishes the
// bootstrap kubeconfig in the management cluster, runs the kubelet CSR
// approver and signer against the managed cluster, and rolls worker pools in
// place through the node agents.
package managed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

// Reconciler reconciles the managed side of Clusters.
type Reconciler struct {
	Client client.Client // the management cluster
	Scheme *runtime.Scheme
	Clock  clock.PassiveClock
	// CSRControllers runs the kubelet CSR approver and signer; false leaves
	// CSRs to an administrator (or another controller).
	CSRControllers bool
	// CSRMaxDuration caps the validity of the kubelet certificates Carousel signs.
	CSRMaxDuration time.Duration
	Metrics        *Metrics
	// Recorder records events on Clusters; nil records none.
	Recorder events.EventRecorder
	// CleanupTimeout bounds how long a deleted Cluster waits for its managed
	// cluster to be cleaned up; zero means DefaultCleanupTimeout.
	CleanupTimeout time.Duration

	mu      sync.Mutex
	runners map[client.ObjectKey]*runner
}

// runner is a connection to one managed cluster: a cache and, when enabled,
// the CSR controller, running until cancel is called.
type runner struct {
	key     string       // digest of the configuration it was started with
	config  *rest.Config // what it connects with
	cluster cluster.Cluster
	direct  client.Client
	cancel  context.CancelFunc
}

// SetupWithManager registers the controller and its cleanup on shutdown.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.runners = map[client.ObjectKey]*runner{}
	byClusterLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		if name := obj.GetLabels()[v1alpha1.LabelCluster]; name != "" {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}}}
		}
		return nil
	})
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.stopAll()
		return nil
	})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("managed-cluster").
		For(&v1alpha1.Cluster{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&corev1.Secret{}, byClusterLabel).
		Watches(&corev1.ConfigMap{}, byClusterLabel).
		Complete(r)
}

// Reconcile brings one managed cluster's bootstrap objects up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &v1alpha1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		if apierrors.IsNotFound(err) {
			r.stop(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !c.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, c)
	}
	if c.Spec.ControlPlane.Endpoint == "" {
		r.stop(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	// Before anything can be written there, so that a deleted Cluster cleans up.
	if err := r.ensureFinalizer(ctx, c); err != nil {
		return ctrl.Result{}, err
	}
	rt, err := r.connectCluster(ctx, c)
	if errors.Is(err, errNotIssued) {
		// Issued by the Cluster controller; its creation event brings us back.
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	caBundle := rt.config.CAData

	for _, obj := range bootstrap.RBAC(c.Name) {
		if err := ensure(ctx, rt.direct, obj); err != nil {
			return ctrl.Result{}, err
		}
	}
	info, err := bootstrap.ClusterInfo(c.Spec.ControlPlane.Endpoint, caBundle)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := ensure(ctx, rt.direct, info); err != nil {
		return ctrl.Result{}, err
	}
	next, err := r.ensureTokens(ctx, c, rt.direct, caBundle)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Come back for the next token, and at least every minute to reconnect
	// a dropped runner: the managed cluster raises no events here.
	return ctrl.Result{RequeueAfter: min(next.Sub(r.Clock.Now()), time.Minute)}, nil
}

// ensureTokens deletes expired bootstrap tokens, issues a new one when none
// has a third of its life left, and publishes the newest as the bootstrap
// kubeconfig. It returns when the tokens need looking at again.
func (r *Reconciler) ensureTokens(ctx context.Context, c *v1alpha1.Cluster, remote client.Client, caBundle []byte) (time.Time, error) {
	var secrets corev1.SecretList
	if err := remote.List(ctx, &secrets, client.InNamespace(metav1.NamespaceSystem), client.MatchingLabels{bootstrap.LabelToken: c.Name}); err != nil {
		return time.Time{}, fmt.Errorf("listing bootstrap tokens: %w", err)
	}
	var tokens []bootstrap.Token
	for i := range secrets.Items {
		if t, err := bootstrap.ParseTokenSecret(&secrets.Items[i]); err == nil {
			tokens = append(tokens, t)
		}
	}
	now, ttl := r.Clock.Now(), c.Spec.KubeletBootstrap.TokenTTLOrDefault()
	expired, create := bootstrap.TokenPlan(tokens, ttl, now)
	for _, t := range expired {
		if err := remote.Delete(ctx, bootstrap.TokenSecret(c.Name, t)); client.IgnoreNotFound(err) != nil {
			return time.Time{}, fmt.Errorf("deleting expired bootstrap token %s: %w", t.ID, err)
		}
	}
	if create {
		t, err := bootstrap.NewToken(ttl, now)
		if err != nil {
			return time.Time{}, err
		}
		if err := remote.Create(ctx, bootstrap.TokenSecret(c.Name, t)); err != nil {
			return time.Time{}, fmt.Errorf("creating a bootstrap token: %w", err)
		}
		tokens = append(tokens, t)
	}
	newest, _ := bootstrap.Newest(tokens, now)
	kubeconfig, err := bootstrap.Kubeconfig(c.Spec.ControlPlane.Endpoint, caBundle, newest)
	if err != nil {
		return time.Time{}, err
	}
	published := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.BootstrapKubeconfigSecretName(c.Name),
		Labels: map[string]string{v1alpha1.LabelCluster: c.Name}}, Data: map[string][]byte{v1alpha1.DataKeyKubeconfig: kubeconfig}}
	if err := ctrl.SetControllerReference(c, published, r.Scheme); err != nil {
		return time.Time{}, err
	}
	if err := ensure(ctx, r.Client, published); err != nil {
		return time.Time{}, err
	}
	return newest.Expires.Add(-ttl / 3), nil
}

func (r *Reconciler) event(c *v1alpha1.Cluster, eventType, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(c, nil, eventType, reason, "Cleanup", format, args...)
	}
}

// ensure creates obj, or updates the existing object when its content differs.
func ensure(ctx context.Context, c client.Client, obj client.Object) error {
	existing := obj.DeepCopyObject().(client.Object)
	err := c.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
		return nil
	case err != nil:
		return err
	case sameContent(existing, obj):
		return nil
	}
	obj.SetResourceVersion(existing.GetResourceVersion())
	if err := c.Update(ctx, obj); err != nil {
		return fmt.Errorf("updating %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// sameContent compares what ensure manages of each kind.
func sameContent(have, want client.Object) bool {
	switch w := want.(type) {
	case *rbacv1.ClusterRoleBinding:
		h := have.(*rbacv1.ClusterRoleBinding)
		return equality.Semantic.DeepEqual(h.RoleRef, w.RoleRef) && equality.Semantic.DeepEqual(h.Subjects, w.Subjects)
	case *rbacv1.RoleBinding:
		h := have.(*rbacv1.RoleBinding)
		return equality.Semantic.DeepEqual(h.RoleRef, w.RoleRef) && equality.Semantic.DeepEqual(h.Subjects, w.Subjects)
	case *rbacv1.Role:
		return equality.Semantic.DeepEqual(have.(*rbacv1.Role).Rules, w.Rules)
	case *corev1.ConfigMap:
		return equality.Semantic.DeepEqual(have.(*corev1.ConfigMap).Data, w.Data)
	case *corev1.Secret:
		h := have.(*corev1.Secret)
		return equality.Semantic.DeepEqual(h.Data, w.Data) && h.Labels[v1alpha1.LabelCluster] == w.Labels[v1alpha1.LabelCluster]
	}
	return false
}

// errNotIssued means the Cluster controller has not issued the trust bundle
// or Carousel's client certificate yet.
var errNotIssued = errors.New("the managed cluster's credentials are not issued yet")

// connectCluster connects to the Cluster's managed cluster with Carousel's own
// client certificate. Everything it reads lives in the Cluster's namespace,
// which a tenant may write, so the connection is built from data only (see
// credentials.RESTConfig), never from the operator Secret's kubeconfig.
func (r *Reconciler) connectCluster(ctx context.Context, c *v1alpha1.Cluster) (*runner, error) {
	bundle := &corev1.ConfigMap{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, v1alpha1.CARoleCluster)}, bundle); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errNotIssued
		}
		return nil, err
	}
	operator := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.CertificateSecretName(c.Name, credentials.CertOperator)}, operator); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errNotIssued
		}
		return nil, err
	}
	cfg, err := credentials.RESTConfig(c.Spec.ControlPlane.Endpoint, []byte(bundle.Data[v1alpha1.DataKeyCABundle]),
		operator.Data[v1alpha1.DataKeyCertificate], operator.Data[v1alpha1.DataKeyPrivateKey])
	if err != nil {
		return nil, fmt.Errorf("the managed cluster's client configuration: %w", err)
	}
	return r.connect(ctx, client.ObjectKeyFromObject(c), cfg)
}

// connect returns the runner for a managed cluster, (re)starting it when the
// configuration changed (Carousel's own client certificate is renewed during a
// rotation, the cluster CA bundle changes, the endpoint moves).
func (r *Reconciler) connect(ctx context.Context, key client.ObjectKey, cfg *rest.Config) (*runner, error) {
	digest := configDigest(cfg)
	r.mu.Lock()
	existing := r.runners[key]
	r.mu.Unlock()
	if existing != nil && existing.key == digest {
		return existing, nil
	}
	rt, err := r.start(key, cfg, digest)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	old := r.runners[key]
	r.runners[key] = rt
	r.mu.Unlock()
	if old != nil {
		old.cancel()
	}
	log.FromContext(ctx).Info("connected to the managed cluster", "endpoint", cfg.Host)
	return rt, nil
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

// start connects to a managed cluster: a cache of its CSRs, Nodes and
// Carousel's bootstrap-token Secrets, and the CSR controller on top.
func (r *Reconciler) start(key client.ObjectKey, cfg *rest.Config, digest string) (*runner, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 100, 200
	cl, err := cluster.New(cfg, func(o *cluster.Options) {
		o.Scheme = r.Scheme
		o.Cache.ByObject = map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Namespaces: map[string]cache.Config{metav1.NamespaceSystem: {}}},
		}
	})
	if err != nil {
		return nil, err
	}
	direct, err := client.New(cfg, client.Options{Scheme: r.Scheme})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	rt := &runner{key: digest, config: cfg, cluster: cl, direct: direct, cancel: cancel}
	// A runner that fails (its cache never synced: the API server was not
	// up yet) is dropped, and the next reconcile connects again.
	runUntilFailure := func(start func(context.Context) error) {
		if err := start(ctx); err != nil && ctx.Err() == nil {
			r.drop(key, rt)
		}
	}
	go runUntilFailure(cl.Start)
	if r.CSRControllers {
		c, err := controller.NewUnmanaged("kubelet-csr-"+key.Namespace+"-"+key.Name, controller.Options{
			Reconciler: &csrReconciler{cluster: key, remote: cl.GetClient(), management: r.Client, clock: r.Clock,
				maxDuration: r.CSRMaxDuration, metrics: r.Metrics},
			MaxConcurrentReconciles: 4,
			SkipNameValidation:      ptr.To(true),
		})
		if err != nil {
			cancel()
			return nil, err
		}
		if err := c.Watch(source.Kind(cl.GetCache(), &certificatesv1.CertificateSigningRequest{},
			&handler.TypedEnqueueRequestForObject[*certificatesv1.CertificateSigningRequest]{})); err != nil {
			cancel()
			return nil, err
		}
		go runUntilFailure(c.Start)
	}
	return rt, nil
}

// Remote returns a client of a managed cluster Carousel is connected to.
func (r *Reconciler) Remote(key client.ObjectKey) (client.Client, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rt, ok := r.runners[key]
	if !ok {
		return nil, false
	}
	return rt.direct, true
}

func (r *Reconciler) stop(key client.ObjectKey) {
	r.mu.Lock()
	rt := r.runners[key]
	delete(r.runners, key)
	r.mu.Unlock()
	if rt != nil {
		rt.cancel()
	}
}

// drop stops rt and forgets it, unless it was replaced already.
func (r *Reconciler) drop(key client.ObjectKey, rt *runner) {
	r.mu.Lock()
	if r.runners[key] == rt {
		delete(r.runners, key)
	}
	r.mu.Unlock()
	rt.cancel()
}

func (r *Reconciler) stopAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, rt := range r.runners {
		rt.cancel()
		delete(r.runners, key)
	}
}
