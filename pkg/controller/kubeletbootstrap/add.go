package kubeletbootstrap

import (
	"context"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

// MaxRetryInterval is the longest a Cluster waits after a failed reconcile.
// Most failures are a managed API server that is down or not yet started;
// controller-runtime's default backoff would grow to 16 minutes, so that a
// control plane that comes up late would wait that long for its bootstrap
// objects. A minute matches the resync of a reachable Cluster.
const MaxRetryInterval = time.Minute

// retryLimiter is controller-runtime's default rate limiter with the
// per-Cluster backoff capped at MaxRetryInterval.
func retryLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, MaxRetryInterval),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// ControllerName names the controller in logs, metrics and events.
const ControllerName = "kubelet-bootstrap"

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	byClusterLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		if name := obj.GetLabels()[v1alpha1.LabelCluster]; name != "" {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}}}
		}
		return nil
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(controller.Options{RateLimiter: retryLimiter(), MaxConcurrentReconciles: r.Concurrency}).
		For(&v1alpha1.Cluster{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&corev1.Secret{}, byClusterLabel).
		// The records of the old-CA usage gate (of client certificates in
		// use, which changes once a minute, and of the kubeconfigs kubectl
		// carousel issued) are nothing to this controller.
		Watches(&corev1.ConfigMap{}, byClusterLabel, builder.WithPredicates(predicate.NewPredicateFuncs(func(obj client.Object) bool {
			return !credentials.IsRecord(obj.GetLabels()[v1alpha1.LabelCluster], obj.GetName())
		}))).
		Complete(r)
}
