package apiservicebundle

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// SetupWithManager registers the controller: a Cluster is reconciled when it
// changes and when its metrics-server bundle does.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	byBundle := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		labels := obj.GetLabels()
		if name := labels[v1alpha1.LabelCluster]; name != "" && labels[v1alpha1.LabelCABundle] == string(v1alpha1.CARoleMetricsServer) {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}}}
		}
		return nil
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("apiservice-bundle").
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Concurrency}).
		For(&v1alpha1.Cluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.ConfigMap{}, byBundle).
		Complete(r)
}
