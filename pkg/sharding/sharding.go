// Package sharding runs one manager as a shard of a ControllerRing of
// github.com/timebertt/kubernetes-controller-sharding: its sharder assigns
// every Cluster and RotationCampaign to one shard through a label, moves them
// when a shard joins or dies, and each shard reconciles only what it was
// assigned. This package holds what a shard needs from that project's
// pkg/shard: the shard Lease in place of leader election, the caches
// restricted to the shard's objects, and the drain handshake.
package sharding

import (
	"cmp"
	"fmt"
	"time"

	shardingv1alpha1 "github.com/timebertt/kubernetes-controller-sharding/pkg/apis/sharding/v1alpha1"
	shardcontroller "github.com/timebertt/kubernetes-controller-sharding/pkg/shard/controller"
	shardlease "github.com/timebertt/kubernetes-controller-sharding/pkg/shard/lease"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	mgrOpts.LeaderElection = true
	mgrOpts.LeaderElectionResourceLockInterface = lock
	mgrOpts.LeaderElectionReleaseOnCancel = true
	// The Lease is renewed every RetryPeriod; a renewal that has not
	// succeeded for RenewDeadline stops the manager, before it lapses.
	duration := cmp.Or(s.LeaseDuration, DefaultLeaseDuration)
	renew, retry := duration*2/3, min(2*time.Second, duration/5)
	mgrOpts.LeaseDuration, mgrOpts.RenewDeadline, mgrOpts.RetryPeriod = &duration, &renew, &retry
	assigned := labels.SelectorFromSet(labels.Set{shardingv1alpha1.LabelShard(s.ControllerRing): s.Name})
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

// Reconciler wraps r, the reconciler of the sharded kind obj: it reconciles
// only objects assigned to the shard and, for one the sharder drains,
// removes the shard and drain labels instead, so that the sharder can give
// it to another shard.
func (s Shard) Reconciler(c client.Client, obj client.Object, r reconcile.Reconciler) reconcile.Reconciler {
	if !s.Enabled() {
		return r
	}
	return &shardcontroller.Reconciler{Object: obj, Client: c, ControllerRingName: s.ControllerRing, ShardName: s.Name, Do: r}
}
