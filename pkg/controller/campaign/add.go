// Package campaign is the RotationCampaign controller: it rotates the CAs of
// the Clusters a campaign selects in waves, as package campaign decides.
package campaign

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/sharding"
)

// A shard patches a campaign's labels to hand it over to the sharder.
// +kubebuilder:rbac:groups=carousel.dev,resources=rotationcampaigns,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=carousel.dev,resources=rotationcampaigns/status,verbs=get;patch

// ControllerName names the controller in logs, metrics and events.
const ControllerName = "rotationcampaign"

// SetupWithManager registers the controller: it reconciles a campaign when
// its spec changes and a moment after a Cluster of its namespace changes
// (clusterChangesBatch). In a shard it reconciles only the campaigns
// assigned to it, and hands over those the sharder drains; the Clusters of
// other shards reach it through Resync.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, shard sharding.Shard) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.RotationCampaign{}, builder.WithPredicates(shard.Predicate())).
		Watches(&v1alpha1.Cluster{}, afterClusterChanges{r.campaignsOfNamespace}).
		Complete(shard.Reconciler(mgr.GetClient(), &v1alpha1.RotationCampaign{}, r))
}

// clusterChangesBatch is how long after a Cluster changed its campaigns are
// looked at. A pass reads every Cluster a campaign selects, and while a fleet
// rotates its Clusters change many times a second: the changes of that moment
// then make one pass, not one pass each.
const clusterChangesBatch = time.Second

// afterClusterChanges enqueues the campaigns that map names for a Cluster
// that changed, clusterChangesBatch later; a campaign already waiting keeps
// its earlier turn.
type afterClusterChanges struct {
	campaigns handler.MapFunc
}

var _ handler.EventHandler = afterClusterChanges{}

func (h afterClusterChanges) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.add(ctx, e.Object, q)
}

func (h afterClusterChanges) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.add(ctx, e.ObjectNew, q)
}

func (h afterClusterChanges) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.add(ctx, e.Object, q)
}

func (h afterClusterChanges) Generic(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.add(ctx, e.Object, q)
}

func (h afterClusterChanges) add(ctx context.Context, obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	for _, req := range h.campaigns(ctx, obj) {
		q.AddAfter(req, clusterChangesBatch)
	}
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
