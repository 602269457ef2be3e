package workerrollout

import (
	"cmp"
	"maps"
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
// What it holds of a cluster is dropped when a read of the cluster's Nodes
// fails (Forget): the API server may be away, and its return is what the
// count is about. The zero value is ready to use, and safe for concurrent
// use; a nil one counts a node offline at the first look behind (as a unit
// test may want).
type OfflineNodes struct {
	// Gap is the longest time between two looks at a node that still
	// counts as one stretch behind: a look after a longer gap (no rollout
	// or gate looked in between, a phase or a rotation later) counts from
	// anew. It must be longer than the time between a cluster's looks
	// (--max-managed-poll-interval); zero means DefaultOfflineLookGap.
	Gap time.Duration

	mu     sync.Mutex
	behind map[types.NamespacedName]map[string]stretch
}

// DefaultOfflineLookGap is OfflineNodes.Gap when not set.
const DefaultOfflineLookGap = 10 * time.Minute

// stretch is a node's time behind: since its first look behind, until
// its last.
type stretch struct{ since, last time.Time }

// Confirmed reports whether node name of cluster, whose Lease is now
// behind (by more than its pool's offlineNodeTimeout) or not, has been seen
// behind, at each look, for OfflineConfirmation by now, with no gap between
// two looks longer than Gap. A node seen not behind is forgotten: it counts
// from its next look behind.
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
		o.behind = map[types.NamespacedName]map[string]stretch{}
	}
	nodes := o.behind[cluster]
	if nodes == nil {
		nodes = map[string]stretch{}
		o.behind[cluster] = nodes
	}
	gap := cmp.Or(o.Gap, DefaultOfflineLookGap)
	s, ok := nodes[name]
	if !ok {
		// A node last looked at longer ago than gap counts from anew, as if
		// it were not remembered: forget such nodes, so that what a cluster
		// holds stays bounded by the nodes seen behind lately (a node
		// deleted while behind is never seen not behind).
		maps.DeleteFunc(nodes, func(_ string, s stretch) bool { return now.Sub(s.last) > gap })
	}
	if !ok || s.since.After(now) || now.Sub(s.last) > gap {
		s.since = now
	}
	s.last = now
	nodes[name] = s
	return now.Sub(s.since) >= OfflineConfirmation
}

// Forget drops what is remembered of cluster (deleted, no longer this
// manager's, or its Nodes could not be read).
func (o *OfflineNodes) Forget(cluster types.NamespacedName) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.behind, cluster)
}
