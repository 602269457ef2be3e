package managed

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
)

// FinalizerCleanup keeps a deleted Cluster until Carousel has removed what it
// wrote into the managed cluster: bootstrap tokens (valid for days), the
// TLS-bootstrapping RBAC and cluster-info. It is added once the Cluster has
// an endpoint.
const FinalizerCleanup = "carousel.dev/managed-cluster-cleanup"

// DefaultCleanupTimeout is how long a deleted Cluster waits for its managed
// cluster to be reachable before it is released without the cleanup.
const DefaultCleanupTimeout = 5 * time.Minute

// cleanupRetry is how soon a failed cleanup is tried again.
const cleanupRetry = 5 * time.Second

// ensureFinalizer adds FinalizerCleanup, once.
func (r *Reconciler) ensureFinalizer(ctx context.Context, c *v1alpha1.Cluster) error {
	if controllerutil.ContainsFinalizer(c, FinalizerCleanup) {
		return nil
	}
	before := c.DeepCopy()
	controllerutil.AddFinalizer(c, FinalizerCleanup)
	if err := r.Client.Patch(ctx, c, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding finalizer %s: %w", FinalizerCleanup, err)
	}
	return nil
}

// finalize removes Carousel's objects from the managed cluster of a deleted
// Cluster and then releases it. A managed cluster that stays unreachable
// holds the deletion for CleanupTimeout at most: then the Cluster is released
// with a Warning event that names what was left behind.
func (r *Reconciler) finalize(ctx context.Context, c *v1alpha1.Cluster) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(c)
	if !controllerutil.ContainsFinalizer(c, FinalizerCleanup) {
		r.stop(key)
		return ctrl.Result{}, nil
	}
	err := r.cleanup(ctx, c)
	if err != nil {
		timeout := r.CleanupTimeout
		if timeout == 0 {
			timeout = DefaultCleanupTimeout
		}
		if waited := r.Clock.Since(c.DeletionTimestamp.Time); waited < timeout {
			log.FromContext(ctx).Info("cleanup of the managed cluster failed; retrying", "error", err.Error())
			return ctrl.Result{RequeueAfter: min(cleanupRetry, timeout-waited)}, nil
		}
		r.event(c, corev1.EventTypeWarning, v1alpha1.EventManagedCleanupAbandoned,
			"Released after %s without cleaning the managed cluster (%v): delete the Secrets labelled %s=%s in kube-system (bootstrap tokens, which also expire by themselves), the ClusterRoleBindings %s, %s, %s and kube-public/%s by hand",
			timeout, err, bootstrap.LabelToken, c.Name, bootstrap.BindingNodeBootstrapper, bootstrap.BindingNodeClient, bootstrap.BindingSelfNodeClient, bootstrapapi.ConfigMapClusterInfo)
	}
	r.stop(key)
	before := c.DeepCopy()
	controllerutil.RemoveFinalizer(c, FinalizerCleanup)
	if err := r.Client.Patch(ctx, c, client.MergeFrom(before)); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("removing finalizer %s: %w", FinalizerCleanup, err)
	}
	return ctrl.Result{}, nil
}

// cleanup deletes, through the managed cluster's connection, Carousel's
// bootstrap tokens, pinned node addresses, RBAC and cluster-info.
func (r *Reconciler) cleanup(ctx context.Context, c *v1alpha1.Cluster) error {
	rt, err := r.connectCluster(ctx, c)
	if err != nil {
		return err
	}
	if err := rt.direct.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(metav1.NamespaceSystem),
		client.MatchingLabels{bootstrap.LabelToken: c.Name}); err != nil {
		return fmt.Errorf("deleting bootstrap tokens: %w", err)
	}
	if err := rt.direct.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(metav1.NamespaceSystem),
		client.MatchingLabels{LabelServingAddresses: c.Name}); err != nil {
		return fmt.Errorf("deleting pinned node addresses: %w", err)
	}
	objs := append(bootstrap.RBAC(c.Name), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo}})
	var errs []error
	for _, obj := range objs {
		if err := rt.direct.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err))
		}
	}
	return errors.Join(errs...)
}
