package maintenance

import (
	"fmt"
	"time"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// Decision is what to do with a queued maintenance operation now.
type Decision struct {
	// Run: carry the operation out now, by moving it to the operation
	// annotation.
	Run bool
	// Reason and Message say why it waits, for the MaintenanceOperationQueued
	// condition; empty when it runs.
	Reason, Message string
	// Next is when to look again if nothing else changes: the next opening
	// of the window; zero when a change (of the phase, the spec or the
	// annotation) must come first.
	Next time.Time
}

// Decide decides, at now, about the operation queued as value for a Cluster
// whose maintenance settings are spec and whose rotations are in phases: it
// runs inside the window, once the phases allow it (rotation.Allowed).
func Decide(value string, spec *v1alpha1.MaintenanceSpec, phases rotation.Phases, now time.Time) Decision {
	op, err := Queueable(value)
	if err != nil {
		return Decision{Reason: v1alpha1.ReasonInvalidMaintenanceOperation, Message: err.Error()}
	}
	if spec == nil {
		return Decision{Reason: v1alpha1.ReasonNoMaintenanceWindow,
			Message: fmt.Sprintf("%s waits for a maintenance window: set spec.maintenance.timeWindow", value)}
	}
	w, err := ParseWindow(spec.TimeWindow.Begin, spec.TimeWindow.End)
	if err != nil {
		return Decision{Reason: v1alpha1.ReasonNoMaintenanceWindow, Message: fmt.Sprintf("%s waits: spec.maintenance.timeWindow: %v", value, err)}
	}
	if !w.Contains(now) {
		next := w.NextOpening(now)
		return Decision{Reason: v1alpha1.ReasonWaitingForMaintenanceWindow, Next: next,
			Message: fmt.Sprintf("%s waits for the maintenance window, which opens next at %s", value, next.UTC().Format(time.RFC3339))}
	}
	if err := rotation.Allowed(op.Verb, phases); err != nil {
		return Decision{Reason: v1alpha1.ReasonMaintenanceOperationNotAllowed,
			Message: fmt.Sprintf("%s waits until the rotation's phase allows it: %v", value, err)}
	}
	return Decision{Run: true}
}
