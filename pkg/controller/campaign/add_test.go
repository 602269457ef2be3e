package campaign

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// The changes of a rotating fleet's Clusters, while a campaign's pass runs
// and after it, make one more pass, clusterChangesBatch after the first.
func TestClusterChangesMakeOnePassABatchLater(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
		workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: clock})
	defer q.ShutDown()
	wave := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "fleet", Name: "wave"}}
	h := afterClusterChanges{func(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{wave} }}
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "c-0001"}}
	changeClusters := func() {
		for range 50 {
			h.Update(context.Background(), event.UpdateEvent{ObjectOld: c, ObjectNew: c}, q)
		}
	}
	// waitForLen waits for the queue's own goroutine to move what is due.
	waitForLen := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for q.Len() != want && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := q.Len(); got != want {
			t.Fatalf("%d campaigns ready, want %d", got, want)
		}
	}

	changeClusters()
	if q.Len() != 0 {
		t.Fatal("the campaign is ready at once, not a batch later")
	}
	clock.Step(clusterChangesBatch)
	waitForLen(1)
	got, _ := q.Get() // the pass begins
	if got != wave {
		t.Fatalf("got %v, want the campaign", got)
	}
	changeClusters()
	q.Done(got)
	if q.Len() != 0 {
		t.Fatal("the changes during the pass made the next one begin at once")
	}
	clock.Step(clusterChangesBatch)
	waitForLen(1)
}
