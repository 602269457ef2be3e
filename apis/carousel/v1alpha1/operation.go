package v1alpha1

import (
	"fmt"
	"strings"
)

// Operation is a parsed value of the carousel.dev/operation annotation.
type Operation struct {
	// Verb is OperationStartCARotation, OperationCompleteCARotation,
	// OperationReconcile, OperationRolloutWorkers or OperationReissueCA.
	Verb string
	// Pools are the worker pools named by a rollout-workers operation.
	Pools []string
	// Roles are the CA roles named by a reissue-ca operation.
	Roles []CARole
}

// Verbs of the operations that take a list.
const (
	// OperationRolloutWorkers is the verb of rollout-workers=<pool>[,<pool>].
	OperationRolloutWorkers = "rollout-workers"
	// OperationReissueCA is the verb of reissue-ca=<role>[,<role>].
	OperationReissueCA = "reissue-ca"
)

// ParseOperation parses an operation annotation value. It refuses unknown
// verbs and malformed or repeated pool lists; whether the operation is allowed
// for a given Cluster is decided by ValidateOperation.
func ParseOperation(value string) (Operation, error) {
	switch value {
	case OperationStartCARotation, OperationCompleteCARotation, OperationReconcile:
		return Operation{Verb: value}, nil
	}
	if list, ok := strings.CutPrefix(value, OperationRolloutWorkersPrefix); ok {
		pools, err := parseList(value, list, "worker pool", OperationRolloutWorkersPrefix+"<pool>[,<pool>]")
		if err != nil {
			return Operation{}, err
		}
		return Operation{Verb: OperationRolloutWorkers, Pools: pools}, nil
	}
	if list, ok := strings.CutPrefix(value, OperationReissueCAPrefix); ok {
		names, err := parseList(value, list, "CA role", OperationReissueCAPrefix+"<role>[,<role>]")
		if err != nil {
			return Operation{}, err
		}
		roles := make([]CARole, 0, len(names))
		for _, n := range names {
			if !oneOf(CARole(n), CARoles()) {
				return Operation{}, fmt.Errorf("operation %q names %q, which is not a CA role: use one of %v", value, n, CARoles())
			}
			roles = append(roles, CARole(n))
		}
		return Operation{Verb: OperationReissueCA, Roles: roles}, nil
	}
	return Operation{}, fmt.Errorf("unknown operation %q: use one of %s, %s, %s, %s<pool>[,<pool>] or %s<role>[,<role>]",
		value, OperationStartCARotation, OperationCompleteCARotation, OperationReconcile, OperationRolloutWorkersPrefix, OperationReissueCAPrefix)
}

// parseList splits the comma-separated list of an operation, refusing empty
// and repeated items.
func parseList(value, list, what, usage string) ([]string, error) {
	items := strings.Split(list, ",")
	seen := make(map[string]bool, len(items))
	for _, item := range items {
		if item == "" {
			return nil, fmt.Errorf("operation %q names an empty %s: use %s", value, what, usage)
		}
		if seen[item] {
			return nil, fmt.Errorf("operation %q names %s %q twice", value, what, item)
		}
		seen[item] = true
	}
	return items, nil
}

// String renders the operation as an annotation value.
func (o Operation) String() string {
	switch o.Verb {
	case OperationRolloutWorkers:
		return OperationRolloutWorkersPrefix + strings.Join(o.Pools, ",")
	case OperationReissueCA:
		roles := make([]string, len(o.Roles))
		for i, r := range o.Roles {
			roles[i] = string(r)
		}
		return OperationReissueCAPrefix + strings.Join(roles, ",")
	}
	return o.Verb
}
