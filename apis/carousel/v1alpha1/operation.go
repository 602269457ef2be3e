package v1alpha1

import (
	"fmt"
	"strings"
)

// Operation is a parsed value of the carousel.dev/operation annotation.
type Operation struct {
	// Verb is OperationStartCARotation, OperationCompleteCARotation,
	// OperationReconcile or OperationRolloutWorkers.
	Verb string
	// Pools are the worker pools named by a rollout-workers operation.
	Pools []string
}

// OperationRolloutWorkers is the verb of a rollout-workers=<pool>[,<pool>] operation.
const OperationRolloutWorkers = "rollout-workers"

// ParseOperation parses an operation annotation value. It refuses unknown
// verbs and malformed or repeated pool lists; whether the operation is allowed
// for a given Cluster is decided by ValidateOperation.
func ParseOperation(value string) (Operation, error) {
	switch value {
	case OperationStartCARotation, OperationCompleteCARotation, OperationReconcile:
		return Operation{Verb: value}, nil
	}
	list, ok := strings.CutPrefix(value, OperationRolloutWorkersPrefix)
	if !ok {
		return Operation{}, fmt.Errorf("unknown operation %q: use one of %s, %s, %s or %s<pool>[,<pool>]",
			value, OperationStartCARotation, OperationCompleteCARotation, OperationReconcile, OperationRolloutWorkersPrefix)
	}
	pools := strings.Split(list, ",")
	seen := make(map[string]bool, len(pools))
	for _, pool := range pools {
		if pool == "" {
			return Operation{}, fmt.Errorf("operation %q names an empty worker pool: use %s<pool>[,<pool>]", value, OperationRolloutWorkersPrefix)
		}
		if seen[pool] {
			return Operation{}, fmt.Errorf("operation %q names worker pool %q twice", value, pool)
		}
		seen[pool] = true
	}
	return Operation{Verb: OperationRolloutWorkers, Pools: pools}, nil
}

// String renders the operation as an annotation value.
func (o Operation) String() string {
	if o.Verb == OperationRolloutWorkers {
		return OperationRolloutWorkersPrefix + strings.Join(o.Pools, ",")
	}
	return o.Verb
}
