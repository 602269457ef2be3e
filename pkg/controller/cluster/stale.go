package cluster

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// StaleReadLimit is how long a Cluster's passes may keep ending on a stale
// read (staleRead, or a Cluster write that conflicted) and be retried every
// second with Ready as it was. A cache that catches up takes well under a
// second; one that has not caught up in a minute (a watch that stopped
// delivering, a writer that changes the object at every pass) is a failure:
// the pass reports it, in Ready when it can, and the controller's backoff
// (from 5 ms, doubling, to some 17 minutes) takes over from the one-second
// retries.
const StaleReadLimit = time.Minute

// runs remembers, per Cluster, since when something has kept happening to
// it: since the first time it was seen (start) until forget.
type runs struct {
	mu    sync.Mutex
	since map[types.NamespacedName]time.Time
}

// start returns when the Cluster's run began: now, if it begins now.
func (r *runs) start(key types.NamespacedName, now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	since, ok := r.since[key]
	if !ok {
		if r.since == nil {
			r.since = map[types.NamespacedName]time.Time{}
		}
		r.since[key], since = now, now
	}
	return since
}

// began returns when the Cluster's run began; the zero time if it is in
// none.
func (r *runs) began(key types.NamespacedName) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.since[key]
}

// forget ends the Cluster's run.
func (r *runs) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.since, key)
}

// staleReads remembers, per Cluster, since when its passes have ended on a
// stale read without a pass between that did not; forget ends the run: a
// pass got past them, or the Cluster is gone or no longer this shard's.
type staleReads struct{ runs }

// retry is how a pass that ended on a stale read at now ends: looked at again
// in a second until the Cluster's passes have done so for StaleReadLimit, and
// from then on with an error that no longer counts as a stale read, so that
// the status reports it and the controller backs off.
func (s *staleReads) retry(key types.NamespacedName, now time.Time, cause error) (ctrl.Result, error) {
	if now.Sub(s.start(key, now)) < StaleReadLimit {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	// The cause's text, not the cause: past the limit the error is the pass's
	// failure, no longer a stale read.
	return ctrl.Result{}, fmt.Errorf("what this manager reads has been behind the API server for over %s: %s", StaleReadLimit, cause.Error())
}
