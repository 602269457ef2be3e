package kubeletbootstrap

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A managed API server that stays down for hours must still be looked at
// again within MaxRetryInterval once it comes back.
func TestRetryLimiterBackoffIsCapped(t *testing.T) {
	limiter := retryLimiter()
	down := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "fleet", Name: "late"}}
	other := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "fleet", Name: "fine"}}

	if first := limiter.When(down); first > time.Second {
		t.Fatalf("first retry after %s, want a quick one", first)
	}
	var last time.Duration
	for range 100 { // each failure doubles the wait until the cap
		last = limiter.When(down)
	}
	if last != MaxRetryInterval {
		t.Fatalf("after 100 failures the retry waits %s, want %s", last, MaxRetryInterval)
	}
	if d := limiter.When(other); d > time.Second {
		t.Fatalf("another Cluster's first retry waits %s: one Cluster's failures must not slow the others", d)
	}
	limiter.Forget(down)
	if d := limiter.When(down); d > time.Second {
		t.Fatalf("after a success the retry waits %s, want a quick one again", d)
	}
}
