package workerrollout

import (
	"context"
	"fmt"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// ManualRollout is the Manual strategy: the user rolls the pool and reports it
// with carousel.dev/operation=rollout-workers=<pool>, which removes the pool
// from pendingWorkersRollouts.
type ManualRollout struct{}

// Rollout never finishes by itself.
func (ManualRollout) Rollout(_ context.Context, _ *v1alpha1.Cluster, pool v1alpha1.WorkerPool) (bool, string, error) {
	return false, fmt.Sprintf("roll pool %s and report it with %s=%s%s", pool.Name, v1alpha1.OperationAnnotation, v1alpha1.OperationRolloutWorkersPrefix, pool.Name), nil
}
