// Package campaign is the RotationCampaign controller: it rotates the CAs of
// the Clusters a campaign selects in waves, as package campaign decides.
package campaign

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/sharding"
)

// A shard patches a campaign's labels to hand it over to the sharder.
// +kubebuilder:rbac:groups=carousel.dev,resources=rotationcampaigns,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=carousel.dev,resources=rotationcampaigns/status,verbs=get;update;patch

// ControllerName names the controller in logs, metrics and events.
const ControllerName = "rotationcampaign"

// SetupWithManager registers the controller: it reconciles a campaign when
// its spec changes and when a Cluster of its namespace changes. In a shard
// it reconciles only the campaigns assigned to it, and hands over those the
// sharder drains; the Clusters of other shards reach it through Resync.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, shard sharding.Shard) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.RotationCampaign{}, builder.WithPredicates(shard.Predicate())).
		Watches(&v1alpha1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.campaignsOfNamespace)).
		Complete(shard.Reconciler(mgr.GetClient(), &v1alpha1.RotationCampaign{}, r))
}

// campaignsOfNamespace maps a Cluster to every campaign of its namespace,
// not only those that select it now: a Cluster whose labels changed must
// leave the counts of a campaign that selected it before. A namespace holds
// few campaigns.
func (r *Reconciler) campaignsOfNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	var list v1alpha1.RotationCampaignList
	if err := r.Client.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "Listing the campaigns of a Cluster's namespace", "cluster", obj.GetName())
		return nil
	}
	requests := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return requests
}
