package v1alpha1

import (
	"fmt"
	"strings"
)

// OperationVerb is what an operation asks for. The annotation value is the
// verb, followed, for the verbs that take a list, by "=" and the list.
type OperationVerb string

// The verbs. Which phase each is allowed in, and what it does, is decided in
// package rotation.
const (
	// VerbStartCARotation starts phase 1 of a CA rotation (Preparing).
	VerbStartCARotation OperationVerb = "start-ca-rotation"
	// VerbStartCARotationWithoutWorkersRollout starts phase 1 for the
	// control plane only (PreparingWithoutWorkersRollout): every worker pool
	// is held until VerbRotateRolloutWorkers names it.
	VerbStartCARotationWithoutWorkersRollout OperationVerb = "start-ca-rotation-without-workers-rollout"
	// VerbCompleteCARotation starts phase 2 of a CA rotation (Finalizing).
	VerbCompleteCARotation OperationVerb = "complete-ca-rotation"
	// VerbAbortCARotation takes a rotation in phase 1, or Prepared, back to
	// the old CAs (Aborting).
	VerbAbortCARotation OperationVerb = "abort-ca-rotation"
	// VerbReconcile asks for an immediate reconcile.
	VerbReconcile OperationVerb = "reconcile"
	// VerbRolloutWorkers is rollout-workers=<pool>[,<pool>]: pools rolled by hand.
	VerbRolloutWorkers OperationVerb = "rollout-workers"
	// VerbRotateRolloutWorkers is rotate-rollout-workers=<pool>[,<pool>]:
	// held pools roll with their strategy.
	VerbRotateRolloutWorkers OperationVerb = "rotate-rollout-workers"
	// VerbReissueCA is reissue-ca=<role>[,<role>]: new CAs for lost CA
	// Secrets, or the CA a Secret put back from an older copy holds.
	VerbReissueCA OperationVerb = "reissue-ca"
	// VerbReissueServiceAccountKey accepts a new service-account signing key
	// when its Secret was lost: every token signed by the lost key stops
	// being valid.
	VerbReissueServiceAccountKey OperationVerb = "reissue-service-account-key"
	// VerbRotateServiceAccountKeyStart starts phase 1 of a service-account
	// signing key rotation (Preparing).
	VerbRotateServiceAccountKeyStart OperationVerb = "rotate-serviceaccount-key-start"
	// VerbRotateServiceAccountKeyComplete starts phase 2 of a
	// service-account signing key rotation (Finalizing).
	VerbRotateServiceAccountKeyComplete OperationVerb = "rotate-serviceaccount-key-complete"
	// VerbRotateCredentialsStart is VerbStartCARotation and
	// VerbRotateServiceAccountKeyStart at once.
	VerbRotateCredentialsStart OperationVerb = "rotate-credentials-start"
	// VerbRotateCredentialsComplete is VerbCompleteCARotation and
	// VerbRotateServiceAccountKeyComplete at once.
	VerbRotateCredentialsComplete OperationVerb = "rotate-credentials-complete"
)

// CAVerb is what the verb asks of the CA rotation: the verb itself, the CA
// part of a rotate-credentials verb, or empty for a service-account key verb.
func (v OperationVerb) CAVerb() OperationVerb {
	switch v {
	case VerbRotateCredentialsStart:
		return VerbStartCARotation
	case VerbRotateCredentialsComplete:
		return VerbCompleteCARotation
	case VerbRotateServiceAccountKeyStart, VerbRotateServiceAccountKeyComplete:
		return ""
	}
	return v
}

// StartsCARotation reports whether the verb starts a CA rotation:
// start-ca-rotation, start-ca-rotation-without-workers-rollout or
// rotate-credentials-start.
func (v OperationVerb) StartsCARotation() bool {
	switch v.CAVerb() {
	case VerbStartCARotation, VerbStartCARotationWithoutWorkersRollout:
		return true
	}
	return false
}

// ServiceAccountKeyVerb is what the verb asks of the service-account key
// rotation: rotate-serviceaccount-key-start or -complete, alone or as part of
// a rotate-credentials verb; empty for every other verb.
func (v OperationVerb) ServiceAccountKeyVerb() OperationVerb {
	switch v {
	case VerbRotateServiceAccountKeyStart, VerbRotateCredentialsStart:
		return VerbRotateServiceAccountKeyStart
	case VerbRotateServiceAccountKeyComplete, VerbRotateCredentialsComplete:
		return VerbRotateServiceAccountKeyComplete
	}
	return ""
}

// Operation is a parsed value of the carousel.dev/operation annotation.
type Operation struct {
	Verb OperationVerb
	// Pools are the worker pools named by a rollout-workers or
	// rotate-rollout-workers operation.
	Pools []string
	// Roles are the CA roles named by a reissue-ca operation.
	Roles []CARole
	// Force: a complete-ca-rotation or rotate-credentials-complete
	// operation with OperationForceSuffix, which completes although clients
	// still depend on the old CAs; or an abort-ca-rotation one, which
	// deletes the new CAs although kubeconfigs from the new client CA are
	// held.
	Force bool
}

// ParseOperation parses an operation annotation value. It refuses unknown
// verbs and malformed or repeated pool lists; whether the operation is allowed
// for a given Cluster is decided by rotation.ValidateOperation.
func ParseOperation(value string) (Operation, error) {
	switch verb := OperationVerb(value); verb {
	case VerbStartCARotation, VerbStartCARotationWithoutWorkersRollout, VerbCompleteCARotation, VerbAbortCARotation, VerbReconcile, VerbReissueServiceAccountKey,
		VerbRotateServiceAccountKeyStart, VerbRotateServiceAccountKeyComplete, VerbRotateCredentialsStart, VerbRotateCredentialsComplete:
		return Operation{Verb: verb}, nil
	}
	if base, forced := strings.CutSuffix(value, OperationForceSuffix); forced &&
		(OperationVerb(base) == VerbCompleteCARotation || OperationVerb(base) == VerbRotateCredentialsComplete || OperationVerb(base) == VerbAbortCARotation) {
		return Operation{Verb: OperationVerb(base), Force: true}, nil
	}
	for verb, prefix := range map[OperationVerb]string{VerbRolloutWorkers: OperationRolloutWorkersPrefix, VerbRotateRolloutWorkers: OperationRotateRolloutWorkersPrefix} {
		if list, ok := strings.CutPrefix(value, prefix); ok {
			pools, err := parseList(value, list, "worker pool", prefix+"<pool>[,<pool>]")
			if err != nil {
				return Operation{}, err
			}
			return Operation{Verb: verb, Pools: pools}, nil
		}
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
		return Operation{Verb: VerbReissueCA, Roles: roles}, nil
	}
	return Operation{}, fmt.Errorf("unknown operation %q: use one of %s, %s, %s[%s], %s[%s], %s, %s, %s, %s[%s], %s, %s<pool>[,<pool>], %s<pool>[,<pool>], %s<role>[,<role>] or %s",
		value, OperationStartCARotation, OperationStartCARotationWithoutWorkersRollout, OperationCompleteCARotation, OperationForceSuffix, OperationAbortCARotation, OperationForceSuffix,
		VerbRotateServiceAccountKeyStart, VerbRotateServiceAccountKeyComplete, VerbRotateCredentialsStart, VerbRotateCredentialsComplete, OperationForceSuffix, OperationReconcile,
		OperationRolloutWorkersPrefix, OperationRotateRolloutWorkersPrefix, OperationReissueCAPrefix, VerbReissueServiceAccountKey)
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
	case VerbRolloutWorkers, VerbRotateRolloutWorkers:
		return string(o.Verb) + "=" + strings.Join(o.Pools, ",")
	case VerbReissueCA:
		roles := make([]string, len(o.Roles))
		for i, r := range o.Roles {
			roles[i] = string(r)
		}
		return OperationReissueCAPrefix + strings.Join(roles, ",")
	}
	if o.Force {
		return string(o.Verb) + OperationForceSuffix
	}
	return string(o.Verb)
}
