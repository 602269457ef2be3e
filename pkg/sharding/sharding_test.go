package sharding

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	shardingv1alpha1 "github.com/timebertt/kubernetes-controller-sharding/pkg/apis/sharding/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

func TestUnshardedChangesNothing(t *testing.T) {
	var s Shard
	opts := ctrl.Options{}
	if err := s.ConfigureManager(&rest.Config{Host: "https://127.0.0.1:1"}, &opts); err != nil {
		t.Fatal(err)
	}
	if opts.LeaderElection || opts.LeaderElectionResourceLockInterface != nil || opts.Cache.ByObject != nil {
		t.Errorf("an unsharded manager's options changed: %+v", opts)
	}
	inner := &recorder{}
	if r := s.Reconciler(nil, &v1alpha1.Cluster{}, inner); r != reconcile.Reconciler(inner) {
		t.Errorf("an unsharded manager's reconciler is wrapped: %T", r)
	}
	if !s.Predicate().Generic(event.GenericEvent{Object: &v1alpha1.Cluster{}}) {
		t.Error("an unsharded predicate without predicates refuses an object")
	}
}

func TestConfigureManagerHoldsTheShardLeaseAndCachesOnlyTheShardsObjects(t *testing.T) {
	s := Shard{ControllerRing: "carousel", Name: "shard-a", LeaseNamespace: "carousel-system"}
	opts := ctrl.Options{}
	if err := s.ConfigureManager(&rest.Config{Host: "https://127.0.0.1:1"}, &opts); err != nil {
		t.Fatal(err)
	}
	if !opts.LeaderElection || !opts.LeaderElectionReleaseOnCancel || opts.LeaderElectionResourceLockInterface == nil {
		t.Fatalf("no shard Lease: %+v", opts)
	}
	if id := opts.LeaderElectionResourceLockInterface.Identity(); id != "shard-a" {
		t.Errorf("the Lease's holder is %q, want the shard's name", id)
	}
	if *opts.LeaseDuration != DefaultLeaseDuration || *opts.RenewDeadline >= *opts.LeaseDuration || *opts.RetryPeriod >= *opts.RenewDeadline {
		t.Errorf("lease %s, renew deadline %s, retry %s: want the deadline within the duration and the retry within the deadline",
			*opts.LeaseDuration, *opts.RenewDeadline, *opts.RetryPeriod)
	}
	mine := labels.Set{shardingv1alpha1.LabelShard("carousel"): "shard-a"}
	theirs := labels.Set{shardingv1alpha1.LabelShard("carousel"): "shard-b"}
	for _, obj := range Sharded {
		byObject, ok := opts.Cache.ByObject[obj]
		if !ok {
			t.Fatalf("the cache of %T is not restricted", obj)
		}
		if !byObject.Label.Matches(mine) || byObject.Label.Matches(theirs) || byObject.Label.Matches(labels.Set{}) {
			t.Errorf("the cache of %T selects %s: want only the shard's objects", obj, byObject.Label)
		}
	}
}

func TestConfigureManagerNamesTheShardAfterTheHost(t *testing.T) {
	s := Shard{ControllerRing: "carousel", LeaseNamespace: "carousel-system", LeaseDuration: 30 * time.Second}
	opts := ctrl.Options{}
	if err := s.ConfigureManager(&rest.Config{Host: "https://127.0.0.1:1"}, &opts); err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != host || opts.LeaderElectionResourceLockInterface.Identity() != host {
		t.Errorf("shard name %q, Lease holder %q: want the host name %q for both", s.Name, opts.LeaderElectionResourceLockInterface.Identity(), host)
	}
	if *opts.LeaseDuration != 30*time.Second {
		t.Errorf("lease duration %s, want the configured 30s", *opts.LeaseDuration)
	}
}

// A name that cannot be a Lease's or a label's, or a ring's name that
// cannot be in a label's key, is refused before the manager starts: the
// Lease's creates were refused for ever while the replica stayed ready, or
// the cache never synced.
func TestConfigureManagerRefusesNamesTheShardLabelCannotHold(t *testing.T) {
	for _, tt := range []struct {
		ring, name, want string
	}{
		{"carousel", "Shard_A", `--shard-name="Shard_A": a shard's name names its Lease`},
		{"carousel", "shard." + strings.Repeat("a", 60), "the shard label they make is not valid"},
		{"carousel/ring", "shard-a", `--shard-controller-ring="carousel/ring"`},
		{"carousel", "shard-a", ""},
	} {
		s := Shard{ControllerRing: tt.ring, Name: tt.name, LeaseNamespace: "carousel-system"}
		err := s.ConfigureManager(&rest.Config{Host: "https://127.0.0.1:1"}, &ctrl.Options{})
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("ConfigureManager of ring %q, shard %q = %v, want an error saying %q", tt.ring, tt.name, err, tt.want)
		}
	}
}

func TestPredicatePassesTheShardsObjectsAndEveryDrainedOne(t *testing.T) {
	s := Shard{ControllerRing: "carousel", Name: "shard-a"}
	cluster := func(l map[string]string) *v1alpha1.Cluster {
		return &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Labels: l}}
	}
	shardLabel, drainLabel := shardingv1alpha1.LabelShard("carousel"), shardingv1alpha1.LabelDrain("carousel")
	never := predicate.NewPredicateFuncs(func(client.Object) bool { return false })
	for _, tt := range []struct {
		name   string
		labels map[string]string
		p      predicate.Predicate
		want   bool
	}{
		{"the shard's", map[string]string{shardLabel: "shard-a"}, s.Predicate(), true},
		{"the shard's, refused by the controller's predicate", map[string]string{shardLabel: "shard-a"}, s.Predicate(never), false},
		{"another shard's", map[string]string{shardLabel: "shard-b"}, s.Predicate(), false},
		{"drained, whatever the controller's predicate says", map[string]string{shardLabel: "shard-a", drainLabel: "true"}, s.Predicate(never), true},
	} {
		if got := tt.p.Generic(event.GenericEvent{Object: cluster(tt.labels)}); got != tt.want {
			t.Errorf("%s: %t, want %t", tt.name, got, tt.want)
		}
	}
}

// recorder is a controller's reconciler that records what it is asked.
type recorder struct{ reconciled, forgotten []string }

func (r *recorder) Reconcile(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.reconciled = append(r.reconciled, req.Name)
	return reconcile.Result{}, nil
}

func (r *recorder) Forget(req reconcile.Request) { r.forgotten = append(r.forgotten, req.Name) }

func TestReconcilerReconcilesOnlyTheShardsAndForgetsWhatItGivesUp(t *testing.T) {
	s := Shard{ControllerRing: "carousel", Name: "shard-a"}
	shardLabel, drainLabel := shardingv1alpha1.LabelShard("carousel"), shardingv1alpha1.LabelDrain("carousel")
	cluster := func(name string, l map[string]string) *v1alpha1.Cluster {
		return &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name, Labels: l}}
	}
	drained := cluster("drained", map[string]string{shardLabel: "shard-a", drainLabel: "true", "env": "prod"})
	mine := cluster("mine", map[string]string{shardLabel: "shard-a"})
	theirs := cluster("theirs", map[string]string{shardLabel: "shard-b"})
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(drained, mine, theirs).Build()
	inner := &recorder{}
	r := s.Reconciler(c, &v1alpha1.Cluster{}, inner)
	for _, name := range []string{"drained", "mine", "theirs", "gone"} {
		if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "fleet", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(inner.reconciled) != "[mine]" || fmt.Sprint(inner.forgotten) != "[drained theirs gone]" {
		t.Errorf("reconciled %v and forgot %v; want [mine], and [drained theirs gone]", inner.reconciled, inner.forgotten)
	}
	got := &v1alpha1.Cluster{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(drained), got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Labels[shardLabel]; ok || got.Labels[drainLabel] != "" || got.Labels["env"] != "prod" {
		t.Errorf("labels after the hand-over %v: want the shard and drain labels gone, the others kept", got.Labels)
	}
}
