package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// WorkerRollout carries out one rollout strategy for a worker pool.
type WorkerRollout interface {
	// Rollout starts or continues rolling the pool for the Cluster's current
	// phase. It returns true once every node of the pool was observed with the
	// phase's credentials, or is not waited for; otherwise a message saying
	// what it waits for. A message that comes with true names what was not
	// waited for, and is recorded as a Warning event.
	Rollout(ctx context.Context, c *v1alpha1.Cluster, pool v1alpha1.WorkerPool) (done bool, message string, err error)
}

// NodeAsker is a WorkerRollout that can ask nodes of a pool it rolled for the
// current phase already to renew for it once more.
type NodeAsker interface {
	// AskNodes asks those of nodes not asked for the phase yet, and returns
	// their names.
	AskNodes(ctx context.Context, c *v1alpha1.Cluster, nodes []corev1.Node) (asked []string, err error)
}

func pendingPools(c *v1alpha1.Cluster) []v1alpha1.PendingWorkersRollout {
	if rot := c.CARotation(); rot != nil {
		return rot.PendingWorkersRollouts
	}
	return nil
}

// rollWorkers asks each pending pool's strategy to roll it, held pools left
// out, and drops the pools that finished from pendingWorkersRollouts. It
// returns what the pools still pending wait for, and the errors of the pools
// that failed, joined: one pool that fails holds up neither the others'
// rollouts nor their record.
func (r *Reconciler) rollWorkers(ctx context.Context, c *v1alpha1.Cluster) ([]string, error) {
	pending := pendingPools(c)
	if len(pending) == 0 {
		return nil, nil
	}
	var waiting, done, unwaited []string
	var errs []error
	for _, p := range pending {
		pool := c.Spec.WorkerPool(p.Name)
		if pool == nil {
			// The webhook keeps pending pools in the spec; a pool removed
			// without it, held or not, has no nodes left to roll.
			done = append(done, p.Name)
			continue
		}
		if p.Held {
			continue // until rotate-rollout-workers names it
		}
		strategy := r.WorkerRollouts[pool.RolloutStrategy]
		if strategy == nil {
			waiting = append(waiting, fmt.Sprintf("pool %s: the %s strategy is not available in this version; roll it and report it with %s=%s%s",
				pool.Name, pool.RolloutStrategy, v1alpha1.OperationAnnotation, v1alpha1.OperationRolloutWorkersPrefix, pool.Name))
			continue
		}
		ok, msg, err := strategy.Rollout(ctx, c, *pool)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("rolling worker pool %s: %w", pool.Name, err))
		case ok:
			done = append(done, p.Name)
			if msg != "" {
				unwaited = append(unwaited, msg)
			}
		default:
			waiting = append(waiting, msg)
		}
	}
	// One event names every such pool: events of one reason about one
	// version of the Cluster fold into the first one's series.
	if len(unwaited) > 0 {
		r.event(c, corev1.EventTypeWarning, v1alpha1.EventWorkerPoolRolledWithoutOfflineNodes, "%s", strings.Join(unwaited, "; "))
	}
	if rot := rotation.WorkersRolledOut(c.CARotation(), done); rot != c.CARotation() {
		setCARotation(c, rot)
	}
	return waiting, errors.Join(errs...)
}
