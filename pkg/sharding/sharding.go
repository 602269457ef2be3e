// Package sharding runs one manager as a shard of a ControllerRing of
// github.com/timebertt/kubernetes-controller-sharding: its sharder assigns
// every Cluster and RotationCampaign to one shard through a label, moves them
// when a shard joins or dies, and each shard reconciles only what it was
// assigned. This package holds what a shard needs from that project's
// pkg/shard: the shard Lease in place of leader election, the caches
// restricted to the shard's objects, and the drain handshake (ours, to have
// the controllers forget what they give up).
package sharding

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	shardingv1alpha1 "github.com/timebertt/kubernetes-controller-sharding/pkg/apis/sharding/v1alpha1"
	shardcontroller "github.com/timebertt/kubernetes-controller-sharding/pkg/shard/controller"
	shardlease "github.com/timebertt/kubernetes-controller-sharding/pkg/shard/lease"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// Shard is this manager's place in a ControllerRing; the zero value runs
// unsharded.
type Shard struct {
	// ControllerRing names the ring; empty runs unsharded.
	ControllerRing string
	// Name is the shard's name: its Lease's name and holder, and the value
	// of the shard label on its objects. Empty means the host name.
	Name string
	// LeaseNamespace is the namespace of the shard Lease; empty means the
	// Pod's namespace.
	LeaseNamespace string
	// LeaseDuration is how long the shard Lease lasts without a renewal;
	// zero means DefaultLeaseDuration. The sharder takes a shard's objects
	// away once its Lease has been expired for as long again.
	LeaseDuration time.Duration
}

// DefaultLeaseDuration makes the sharder move a dead shard's objects some
// 20 s after its last renewal: twice the duration, plus one renewal period.
const DefaultLeaseDuration = 10 * time.Second

// Sharded objects: the sharder assigns these kinds (the ControllerRing names them).
var Sharded = []client.Object{&v1alpha1.Cluster{}, &v1alpha1.RotationCampaign{}}

// Enabled reports whether the manager runs as a shard.
func (s Shard) Enabled() bool { return s.ControllerRing != "" }

// ConfigureManager makes mgrOpts hold the shard Lease instead of electing a
// leader (so the controllers run only while the shard holds it, and the
// sharder moves its objects away once it does not) and restricts the cache
// of the sharded kinds to the shard's objects. It sets Name when empty.
func (s *Shard) ConfigureManager(cfg *rest.Config, mgrOpts *ctrl.Options) error {
	if !s.Enabled() {
		return nil
	}
	// NewResourceLock sets its user agent on the config it is given.
	lock, err := shardlease.NewResourceLock(rest.CopyConfig(cfg), shardlease.Options{ControllerRingName: s.ControllerRing,
		LeaseNamespace: s.LeaseNamespace, ShardName: s.Name})
	if err != nil {
		return fmt.Errorf("the shard Lease of ControllerRing %s: %w", s.ControllerRing, err)
	}
	s.Name = lock.Identity()
	// The name is the Lease's and the shard label's value; the ring's name is
	// in the label's key. Neither is checked by the lock or the selector, and
	// a bad one failed later: every create of the Lease refused while the
	// replica stayed ready, or a cache that never synced.
	if errs := validation.IsDNS1123Subdomain(s.Name); len(errs) > 0 {
		return fmt.Errorf("--shard-name=%q: a shard's name names its Lease: %s", s.Name, strings.Join(errs, "; "))
	}
	assigned, err := labels.ValidatedSelectorFromSet(labels.Set{shardingv1alpha1.LabelShard(s.ControllerRing): s.Name})
	if err != nil {
		return fmt.Errorf("--shard-controller-ring=%q --shard-name=%q: the shard label they make is not valid: %w", s.ControllerRing, s.Name, err)
	}
	mgrOpts.LeaderElection = true
	mgrOpts.LeaderElectionResourceLockInterface = lock
	mgrOpts.LeaderElectionReleaseOnCancel = true
	// The Lease is renewed every RetryPeriod; a renewal that has not
	// succeeded for RenewDeadline stops the manager, before it lapses.
	duration := cmp.Or(s.LeaseDuration, DefaultLeaseDuration)
	renew, retry := duration*2/3, min(2*time.Second, duration/5)
	mgrOpts.LeaseDuration, mgrOpts.RenewDeadline, mgrOpts.RetryPeriod = &duration, &renew, &retry
	if mgrOpts.Cache.ByObject == nil {
		mgrOpts.Cache.ByObject = map[client.Object]cache.ByObject{}
	}
	for _, obj := range Sharded {
		mgrOpts.Cache.ByObject[obj] = cache.ByObject{Label: assigned}
	}
	return nil
}

// Predicate is the predicate of a controller For a sharded kind: the
// objects assigned to the shard that pass predicates, and every object the
// sharder asks the shard to give up (the drain label).
func (s Shard) Predicate(predicates ...predicate.Predicate) predicate.Predicate {
	if !s.Enabled() {
		return predicate.And(predicates...)
	}
	return shardcontroller.Predicate(s.ControllerRing, s.Name, predicates...)
}

// Forgetter is a controller's reconciler that can drop what it holds for an
// object (its metrics' series, what it remembers): one the shard no longer
// has.
type Forgetter interface {
	reconcile.Reconciler
	Forget(reconcile.Request)
}

// Reconciler wraps r, the reconciler of the sharded kind obj, as the
// project's shardcontroller.Reconciler does: it reconciles only objects
// assigned to the shard and, for one the sharder drains, removes the shard
// and drain labels instead, so that the sharder can give it to another
// shard. Unlike that one, it has r forget every object the shard gives up,
// or no longer finds, so that no series of a Cluster another shard now
// reports stays behind to fire an alert.
func (s Shard) Reconciler(c client.Client, obj client.Object, r Forgetter) reconcile.Reconciler {
	if !s.Enabled() {
		return r
	}
	return &shardReconciler{shard: s, client: c, object: obj, do: r}
}

type shardReconciler struct {
	shard  Shard
	client client.Client
	object client.Object
	do     Forgetter
}

func (r *shardReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := r.object.DeepCopyObject().(client.Object)
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted, or moved to another shard.
			r.do.Forget(req)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	shardLabel, drainLabel := shardingv1alpha1.LabelShard(r.shard.ControllerRing), shardingv1alpha1.LabelDrain(r.shard.ControllerRing)
	objLabels := obj.GetLabels()
	if objLabels[shardLabel] != r.shard.Name {
		r.do.Forget(req)
		return reconcile.Result{}, nil
	}
	if _, drain := objLabels[drainLabel]; drain {
		patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
		delete(objLabels, shardLabel)
		delete(objLabels, drainLabel)
		obj.SetLabels(objLabels)
		if err := r.client.Patch(ctx, obj, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("handing %s over to the sharder: %w", req, err)
		}
		log.FromContext(ctx).Info("Handed over to the sharder, which drains it from this shard", "shard", r.shard.Name)
		r.do.Forget(req)
		return reconcile.Result{}, nil
	}
	return r.do.Reconcile(ctx, req)
}
