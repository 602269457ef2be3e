package rotation

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// ValidateOperation validates the operation annotation of a new Cluster
// (oldC nil) or of an update against the state of oldC: the transition rules
// of a CA rotation (Allowed), and the pools a rollout-workers (pending) or
// rotate-rollout-workers (held) operation names. An annotation that did not change is not validated again, so that
// Carousel's own writes, and edits while an accepted operation waits to be
// picked up, are never refused.
func ValidateOperation(newC, oldC *v1alpha1.Cluster) field.ErrorList {
	value, ok := newC.Annotations[v1alpha1.OperationAnnotation]
	if !ok {
		return nil
	}
	current := newC
	if oldC != nil {
		if oldValue, had := oldC.Annotations[v1alpha1.OperationAnnotation]; had && oldValue == value {
			return nil
		}
		current = oldC
	}
	p := field.NewPath("metadata", "annotations").Key(v1alpha1.OperationAnnotation)
	if current.DeletionTimestamp != nil {
		return field.ErrorList{field.Forbidden(p, "the cluster is being deleted: no operation is accepted")}
	}
	op, err := v1alpha1.ParseOperation(value)
	if err != nil {
		return field.ErrorList{field.Invalid(p, value, err.Error())}
	}
	phase := current.CARotationPhase()
	if err := Allowed(op.Verb, PhasesOf(current)); err != nil && !forcesAbortUnderWay(op, PhasesOf(current)) {
		return field.ErrorList{field.Forbidden(p, err.Error())}
	}
	if err := OldCAsUnused(op, current); err != nil {
		return field.ErrorList{field.Forbidden(p, err.Error())}
	}
	var allErrs field.ErrorList
	for _, pool := range op.Pools {
		switch {
		case newC.Spec.WorkerPool(pool) == nil:
			allErrs = append(allErrs, field.Invalid(p, value, fmt.Sprintf(
				"worker pool %q does not exist (phase %s): name pools from spec.workers", pool, PhaseName(phase))))
		case op.Verb == v1alpha1.VerbRotateRolloutWorkers && !current.IsHeldWorkerPool(pool):
			allErrs = append(allErrs, field.Invalid(p, value, fmt.Sprintf(
				"worker pool %q is not held in phase %s: name only pools listed with held: true in "+
					"status.credentials.rotation.certificateAuthorities.pendingWorkersRollouts", pool, PhaseName(phase))))
		case !current.IsPendingWorkerPool(pool):
			allErrs = append(allErrs, field.Invalid(p, value, fmt.Sprintf(
				"worker pool %q has no pending rollout in phase %s: name only pools listed in status.credentials.rotation.certificateAuthorities.pendingWorkersRollouts", pool, PhaseName(phase))))
		}
	}
	return allErrs
}

// ValidateUpdate validates what a rotation requires of an update: the spec
// changes a rotation under way forbids, and a newly set operation.
func ValidateUpdate(newC, oldC *v1alpha1.Cluster) field.ErrorList {
	var allErrs field.ErrorList
	if !equality.Semantic.DeepEqual(newC.Spec, oldC.Spec) {
		allErrs = append(allErrs, validateSpecChange(newC, oldC)...)
	}
	return append(allErrs, ValidateOperation(newC, oldC)...)
}

// validateSpecChange refuses the spec changes that would break a rotation
// under way: new key or validity settings (the new CAs are already minted),
// removing a pool whose rollout is still awaited, and removing the endpoint,
// which would turn off the checks against the API server that Prepared and
// Completed wait for (of a CA rotation, or the check of the token Secrets
// that a service-account key rotation's Prepared waits for). A changed
// endpoint is allowed: the checks run against whatever the spec names.
func validateSpecChange(newC, oldC *v1alpha1.Cluster) field.ErrorList {
	var allErrs field.ErrorList
	p := field.NewPath("spec")
	phase := oldC.CARotationPhase()
	if keyPhase := oldC.ServiceAccountKeyRotationPhase(); keyPhase == v1alpha1.ServiceAccountKeyPreparing && endpointRemoved(newC, oldC) &&
		!phase.RotationInProgress() { // else refused below, for the CA rotation
		allErrs = append(allErrs, field.Forbidden(p.Child("controlPlane", "endpoint"), fmt.Sprintf(
			"cannot be removed while the service-account key rotation is in phase %s: the rotation checks the token Secrets through the API server at this endpoint; change it to the new address instead, or %s",
			keyPhase, ServiceAccountKeyNextStep(keyPhase))))
	}
	if !phase.RotationInProgress() {
		return allErrs
	}
	if !certificateSettingsEqual(newC.Spec.Certificates, oldC.Spec.Certificates) {
		allErrs = append(allErrs, field.Forbidden(p.Child("certificates"), fmt.Sprintf(
			"cannot change while the CA rotation is in phase %s: %s", phase, NextStep(PhasesOf(oldC)))))
	}
	if endpointRemoved(newC, oldC) {
		allErrs = append(allErrs, field.Forbidden(p.Child("controlPlane", "endpoint"), fmt.Sprintf(
			"cannot be removed while the CA rotation is in phase %s: the rotation checks the API server at this endpoint; change it to the new address instead, or %s", phase, NextStep(PhasesOf(oldC)))))
	}
	for _, pool := range oldC.Spec.Workers {
		changed := newC.Spec.WorkerPool(pool.Name)
		switch {
		case changed == nil && oldC.IsPendingWorkerPool(pool.Name):
			allErrs = append(allErrs, field.Forbidden(p.Child("workers"), fmt.Sprintf(
				"cannot remove worker pool %q while its rollout is pending in phase %s: roll it first", pool.Name, phase)))
		case changed != nil && oldC.IsPendingWorkerPool(pool.Name) && !oldC.IsHeldWorkerPool(pool.Name) &&
			(changed.RolloutStrategy != pool.RolloutStrategy || changed.MachineDeployment != pool.MachineDeployment):
			// A rollout under way would be left half done: a MachineDeployment
			// rolled, or nodes asked to renew, that nothing waits for.
			allErrs = append(allErrs, field.Forbidden(p.Child("workers"), fmt.Sprintf(
				"cannot change the rollout strategy or MachineDeployment of worker pool %q while it is being rolled in phase %s: "+
					"wait until it leaves pendingWorkersRollouts, or roll it yourself and report it with %s=%s%s",
				pool.Name, phase, v1alpha1.OperationAnnotation, v1alpha1.OperationRolloutWorkersPrefix, pool.Name)))
		}
	}
	return allErrs
}

func endpointRemoved(newC, oldC *v1alpha1.Cluster) bool {
	return oldC.Spec.ControlPlane.Endpoint != "" && newC.Spec.ControlPlane.Endpoint == ""
}

func certificateSettingsEqual(a, b v1alpha1.CertificateSettings) bool {
	return a.KeyAlgorithmOrDefault() == b.KeyAlgorithmOrDefault() &&
		a.CAValidityOrDefault() == b.CAValidityOrDefault() &&
		a.LeafValidityOrDefault() == b.LeafValidityOrDefault()
}
