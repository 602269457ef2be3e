package workerrollout

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// OfflineConfirmation is how long, on Carousel's clock, a node's Lease must
// stay behind the newest one by more than its pool's offlineNodeTimeout
// before the node counts as offline. One look cannot tell a node that is
// gone from one whose kubelet has not renewed yet since the managed API
// server came back from an outage as long as that timeout: right after
// the outage the first Leases renewed are the newest, and every other one
// is as far behind as the outage lasted. A kubelet renews its Lease every
// 10 s (a quarter of its 40 s duration), within seconds of the API server's
// return, so a node still behind after a Lease duration is not catching up.
const OfflineConfirmation = 40 * time.Second

// OfflineNodes remembers, for each managed cluster, since when each node
// has been seen behind, so that the InPlace rollout and the old-CA usage
// gate count a node offline only once it stayed behind for
// OfflineConfirmation (see Confirmed). It is kept in memory: a manager that
// restarts counts from its first look, which only holds a rollout longer.
// The zero value is ready to use, and safe for concurrent use; a nil one
// counts a node offline at the first look behind (as a unit test may want).
type OfflineNodes struct {
	mu     sync.Mutex
	behind map[types.NamespacedName]map[string]time.Time
}

// Confirmed reports whether node name of cluster, whose Lease
// is now behind (by more than its pool's offlineNodeTimeout) or not, has
// been seen behind, at each look, for OfflineConfirmation by now. A node
// seen not behind is forgotten: it counts from its next look behind.
func (o *OfflineNodes) Confirmed(cluster types.NamespacedName, name string, behind bool, now time.Time) bool {
	if o == nil {
		return behind
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !behind {
		delete(o.behind[cluster], name)
		return false
	}
	if o.behind == nil {
		o.behind = map[types.NamespacedName]map[string]time.Time{}
	}
	nodes := o.behind[cluster]
	if nodes == nil {
		nodes = map[string]time.Time{}
		o.behind[cluster] = nodes
	}
	since, ok := nodes[name]
	if !ok || since.After(now) {
		since, nodes[name] = now, now
	}
	return now.Sub(since) >= OfflineConfirmation
}

// Forget drops what is remembered of cluster (deleted, or no longer this
// manager's).
func (o *OfflineNodes) Forget(cluster types.NamespacedName) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.behind, cluster)
}
