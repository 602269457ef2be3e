package rotation

import v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"

// List names what a plan line lists for a given Cluster; the caller, who has
// read the Cluster, fills it in.
type List int

const (
	// ListNone means the line lists nothing.
	ListNone List = iota
	// ListCARoles lists every CA role.
	ListCARoles
	// ListConsumers lists the workloads rolled with the Cluster's credentials.
	ListConsumers
	// ListClientCertificates lists the certificates renewed in Preparing.
	ListClientCertificates
	// ListServerCertificates lists the certificates renewed in Finalizing.
	ListServerCertificates
	// ListWorkerPools lists the worker pools and their nodes, one per line below.
	ListWorkerPools
)

// PlanLine is one line of a phase's plan: Format has one %s for the list,
// unless List is ListNone or ListWorkerPools (listed below the line).
type PlanLine struct {
	Format string
	List   List
}

// PhasePlan is what one user-triggered phase of a rotation does.
type PhasePlan struct {
	// Operation starts the phase; the rotation goes through phase Through
	// and ends in Done.
	Operation     string
	Through, Done v1alpha1.CARotationPhase
	// Lines are the steps Decide waits for, in order.
	Lines []PlanLine
	// Then is what the user does once the phase is done; empty for none.
	Then string
	// InsteadOf is the operation this phase is an alternative to; empty for
	// a phase that follows the one before.
	InsteadOf string
}

// Plan returns the two phases of a rotation, and the abort that may replace
// the second, as `kubectl carousel rotation plan` prints them, from the
// steps Decide waits for.
func Plan() []PhasePlan {
	return []PhasePlan{
		{Operation: v1alpha1.OperationStartCARotation, Through: v1alpha1.RotationPreparing, Done: v1alpha1.RotationPrepared,
			Lines: planLines(preparing), Then: "hand the new bundle and kubeconfigs to your own clients"},
		{Operation: v1alpha1.OperationCompleteCARotation, Through: v1alpha1.RotationFinalizing, Done: v1alpha1.RotationCompleted,
			Lines: planLines(finalizing)},
		{Operation: v1alpha1.OperationAbortCARotation, Through: v1alpha1.RotationAborting, Done: v1alpha1.RotationAborted,
			Lines: planLines(aborting), InsteadOf: v1alpha1.OperationCompleteCARotation,
			Then: "issue again the kubeconfigs handed out since the rotation started: the new client CA that signed them is deleted"},
	}
}

func planLines(steps []step) []PlanLine {
	var lines []PlanLine
	for _, s := range steps {
		lines = append(lines, s.plan...)
	}
	return lines
}
