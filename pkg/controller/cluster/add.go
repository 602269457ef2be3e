package cluster

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/sharding"
)

// The permissions the controller manager needs across the management cluster.
// Leader election (leases in its own namespace) and the webhook configuration
// it injects its CA into are granted by the chart, narrowed to one namespace
// and one object.
// +kubebuilder:rbac:groups=carousel.dev,resources=clusters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=carousel.dev,resources=clusters/status,verbs=get;patch
// The objects a Cluster controls block its deletion (blockOwnerDeletion),
// which the OwnerReferencesPermissionEnforcement admission plugin allows
// only to who may update its finalizers.
// +kubebuilder:rbac:groups=carousel.dev,resources=clusters/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get;list;watch;create;update
// It deletes only the Secrets of its probe certificates; the garbage
// collector deletes the rest with their Cluster.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=delete
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ControllerName names the controller in logs, metrics and events.
const ControllerName = "cluster"

// CacheOptions restricts the manager's cache of Secrets, ConfigMaps,
// Deployments and StatefulSets to the objects labelled carousel.dev/cluster,
// so that the operator neither holds nor watches the rest of the management
// cluster's Secrets, and drops every cached object's managedFields, which
// nothing reads (a fleet caches some thirty objects per Cluster). A leaf
// certificate Secret's trust bundle and kubeconfig are cached as digests
// (cacheSecret), and the records of the old-CA usage gate without their data
// (cacheConfigMap): read them from the API server.
func CacheOptions() cache.Options {
	managed, err := labels.NewRequirement(v1alpha1.LabelCluster, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	selector := labels.NewSelector().Add(*managed)
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}:      {Label: selector, Transform: cacheSecret},
		&corev1.ConfigMap{}:   {Label: selector, Transform: cacheConfigMap},
		&appsv1.Deployment{}:  {Label: selector},
		&appsv1.StatefulSet{}: {Label: selector},
	}}
}

// clusterIndex is the cache index of the objects that belong to a Cluster,
// by their carousel.dev/cluster label. Without it a List by that label scans
// every cached object of the namespace, which holds the whole fleet.
const clusterIndex = "metadata.labels[" + v1alpha1.LabelCluster + "]"

// clusterLabel is the value of obj's carousel.dev/cluster label, as an index.
func clusterLabel(obj client.Object) []string {
	if name := obj.GetLabels()[v1alpha1.LabelCluster]; name != "" {
		return []string{name}
	}
	return nil
}

// SetupWithManager registers the controller: it reconciles a Cluster when its
// spec, labels or annotations change, and when a Secret, ConfigMap or
// workload labelled with its name changes. Every Secret and ConfigMap the
// Cluster owns carries that label, and the cache holds no other: the label
// finds the Cluster without the REST mapping that an owner handler looks up
// for each event (8 % of what the manager allocated in a rotating fleet).
// options sets, for one, how many Clusters are reconciled at once (never one
// Cluster twice at once).
// It indexes the cached objects by Cluster, which loadObjects then uses. In
// a shard it reconciles only the Clusters assigned to it, and hands over
// those the sharder drains.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, options controller.Options, shard sharding.Shard) error {
	for _, obj := range []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}, &appsv1.Deployment{}, &appsv1.StatefulSet{}} {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), obj, clusterIndex, clusterLabel); err != nil {
			return fmt.Errorf("indexing %T by Cluster: %w", obj, err)
		}
	}
	r.indexedByCluster = true
	byClusterLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		names := clusterLabel(obj)
		if names == nil {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: names[0]}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(options).
		For(&v1alpha1.Cluster{}, builder.WithPredicates(shard.Predicate(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{})))).
		Watches(&corev1.Secret{}, byClusterLabel).
		Watches(&corev1.ConfigMap{}, byClusterLabel).
		Watches(&appsv1.Deployment{}, byClusterLabel).
		Watches(&appsv1.StatefulSet{}, byClusterLabel).
		Complete(shard.Reconciler(mgr.GetClient(), &v1alpha1.Cluster{}, r))
}
