package kubeletbootstrap

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/clustercache"
	"github.com/carousel-dev/carousel/pkg/metapatch"
)

// DefaultCleanupTimeout is how long a deleted Cluster waits for its managed
// cluster to be reachable before it is released without the cleanup.
const DefaultCleanupTimeout = 5 * time.Minute

// cleanupRetry is how soon a failed cleanup is tried again.
const cleanupRetry = 5 * time.Second

// clearedEndpointTimeout is how long the cleanup of a Cluster whose
// endpoint was cleared is tried, cleanupRetry apart, from its first
// failure, before the Cluster is released without it: by time, for any
// change of the Cluster's Secrets and ConfigMaps (which clearing the
// endpoint makes) starts a pass too.
const clearedEndpointTimeout = 12 * cleanupRetry

// failedCleanups keeps, by Cluster, when the cleanup of a cleared endpoint
// first failed.
type failedCleanups struct {
	mu    sync.Mutex
	first map[client.ObjectKey]time.Time
}

// since records a failure of key's cleanup at now, and returns how long
// ago the first one was.
func (f *failedCleanups) since(key client.ObjectKey, now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first == nil {
		f.first = map[client.ObjectKey]time.Time{}
	}
	first, ok := f.first[key]
	if !ok {
		first, f.first[key] = now, now
	}
	return now.Sub(first)
}

func (f *failedCleanups) forget(key client.ObjectKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.first, key)
}

// errNoEndpoint is why a Cluster without an endpoint, nor a connection still
// live to the one it had, cannot be cleaned up: nothing reaches its managed
// cluster.
var errNoEndpoint = errors.New("no endpoint, and no connection to the one it had")

// ensureFinalizer adds v1alpha1.FinalizerManagedCleanup, once.
func (r *Reconciler) ensureFinalizer(ctx context.Context, c *v1alpha1.Cluster) error {
	if controllerutil.ContainsFinalizer(c, v1alpha1.FinalizerManagedCleanup) {
		return nil
	}
	before := c.DeepCopy()
	controllerutil.AddFinalizer(c, v1alpha1.FinalizerManagedCleanup)
	if err := r.Client.Patch(ctx, c, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding finalizer %s: %w", v1alpha1.FinalizerManagedCleanup, err)
	}
	return nil
}

// finalize removes Carousel's objects from the managed cluster of a deleted
// Cluster, or of one whose endpoint was cleared, and then releases it (the
// finalizer). A managed cluster that stays unreachable holds a deletion for
// CleanupTimeout at most, a cleared endpoint clearedEndpointTimeout (the
// connection to the endpoint it had is kept only for it): then the
// Cluster is released with a Warning event that names what was left behind;
// at once when there is nothing to reach it by (errNoEndpoint).
func (r *Reconciler) finalize(ctx context.Context, c *v1alpha1.Cluster) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(c)
	if !controllerutil.ContainsFinalizer(c, v1alpha1.FinalizerManagedCleanup) {
		r.Connections.Disconnect(key)
		return ctrl.Result{}, nil
	}
	err := r.cleanup(ctx, c)
	switch {
	case err == nil || errors.Is(err, errNoEndpoint):
	case c.DeletionTimestamp.IsZero():
		if failing := r.failedCleanups.since(key, r.Clock.Now()); failing < clearedEndpointTimeout {
			log.FromContext(ctx).Info("cleanup of the managed cluster, whose endpoint was cleared, failed; retrying", "error", err.Error(), "failingFor", failing)
			return ctrl.Result{RequeueAfter: min(cleanupRetry, clearedEndpointTimeout-failing)}, nil
		}
		err = fmt.Errorf("after trying for %s: %w", clearedEndpointTimeout, err)
	default:
		timeout := r.CleanupTimeout
		if timeout == 0 {
			timeout = DefaultCleanupTimeout
		}
		if waited := r.Clock.Since(c.DeletionTimestamp.Time); waited < timeout {
			log.FromContext(ctx).Info("cleanup of the managed cluster failed; retrying", "error", err.Error())
			return ctrl.Result{RequeueAfter: min(cleanupRetry, timeout-waited)}, nil
		}
		err = fmt.Errorf("after %s: %w", timeout, err)
	}
	r.failedCleanups.forget(key)
	if err != nil {
		r.event(c, corev1.EventTypeWarning, v1alpha1.EventManagedCleanupAbandoned, "Cleanup",
			"Released without cleaning the managed cluster (%v): delete the Secrets labelled %s=%s in kube-system (bootstrap tokens, which also expire by themselves), the ConfigMaps labelled %s=%s in kube-system (the nodes' pinned serving addresses, which also go with their Nodes), the ClusterRoleBindings %s, %s, %s, kube-public/%s, kube-system/%s and the Roles and RoleBindings %s in kube-public and %s in kube-system by hand",
			err, v1alpha1.LabelBootstrapToken, c.Name, v1alpha1.LabelServingAddresses, c.Name, bootstrap.BindingNodeBootstrapper, bootstrap.BindingNodeClient, bootstrap.BindingSelfNodeClient,
			bootstrapapi.ConfigMapClusterInfo, bootstrap.NodeTrustConfigMap, bootstrap.ClusterInfoRole, bootstrap.NodeTrustRole)
	}
	if err := r.removeFinalizer(ctx, c); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("removing finalizer %s: %w", v1alpha1.FinalizerManagedCleanup, err)
	}
	r.Connections.Disconnect(key)
	return ctrl.Result{}, nil
}

// removeFinalizer removes v1alpha1.FinalizerManagedCleanup, and only it: a
// merge patch of the list as cached would drop a finalizer another
// controller added since. When the list changed under the patch's index
// (another finalizer removed since, 422 Invalid), it reads the Cluster past
// the cache and patches again.
func (r *Reconciler) removeFinalizer(ctx context.Context, c *v1alpha1.Cluster) error {
	err := r.Client.Patch(ctx, c, metapatch.FinalizerRemoved(v1alpha1.FinalizerManagedCleanup))
	if !apierrors.IsInvalid(err) || r.APIReader == nil {
		return err
	}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
		return err
	}
	if !controllerutil.ContainsFinalizer(c, v1alpha1.FinalizerManagedCleanup) {
		return nil
	}
	return r.Client.Patch(ctx, c, metapatch.FinalizerRemoved(v1alpha1.FinalizerManagedCleanup))
}

// cleanup deletes, through the managed cluster's connection, Carousel's
// bootstrap tokens, pinned node addresses, RBAC, cluster-info and the node
// trust ConfigMap.
func (r *Reconciler) cleanup(ctx context.Context, c *v1alpha1.Cluster) error {
	remote, err := r.managedClient(ctx, c)
	if err != nil {
		return err
	}
	if err := remote.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(metav1.NamespaceSystem),
		client.MatchingLabels{v1alpha1.LabelBootstrapToken: c.Name}); err != nil {
		return fmt.Errorf("deleting bootstrap tokens: %w", err)
	}
	if err := remote.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(metav1.NamespaceSystem),
		client.MatchingLabels{v1alpha1.LabelServingAddresses: c.Name}); err != nil {
		return fmt.Errorf("deleting pinned node addresses: %w", err)
	}
	objs := append(append(bootstrap.RBAC(c.Name), bootstrap.AutoApproveBindings(c.Name)...),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstrap.NodeTrustConfigMap}})
	var errs []error
	for _, obj := range objs {
		if err := remote.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// managedClient is the direct client of the deleted Cluster's managed
// cluster: its connection, made again if what it connects with changed, or
// the live one to its endpoint when what it connects with is gone. A
// foreground deletion (kubectl delete --cascade=foreground, as Argo CD
// deletes) has the garbage collector delete the Cluster's Secrets and
// ConfigMaps before the Cluster, so no connection can be made any more.
// A Cluster whose endpoint was cleared is reached through the connection
// still live to the endpoint it had, or not at all (errNoEndpoint).
func (r *Reconciler) managedClient(ctx context.Context, c *v1alpha1.Cluster) (client.Client, error) {
	if c.Spec.ControlPlane.Endpoint == "" {
		if live, ok := r.Connections.Connection(client.ObjectKeyFromObject(c)); ok {
			return live.Client, nil
		}
		return nil, errNoEndpoint
	}
	conn, err := r.Connections.Connect(ctx, c)
	switch {
	case err == nil:
		return conn.Client, nil
	case errors.Is(err, clustercache.ErrNotIssued):
		// Not one to another endpoint: a Cluster of the same name made
		// since for another managed cluster.
		if live, ok := r.Connections.Connection(client.ObjectKeyFromObject(c)); ok && live.Config.Host == c.Spec.ControlPlane.Endpoint {
			return live.Client, nil
		}
	}
	return nil, err
}
