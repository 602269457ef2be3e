package maintenance

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// Queueable parses value and returns the operation when it may wait for the
// maintenance window: the operations that start or complete a rotation
// phase (queueable). An abort is not one: queued, it would outlive the
// rotation it was meant for and abort the next. The others report or repair something now.
func Queueable(value string) (v1alpha1.Operation, error) {
	op, err := v1alpha1.ParseOperation(value)
	if err != nil {
		return op, err
	}
	if !slices.Contains(queueable, op.Verb) {
		return op, fmt.Errorf("only %s wait for the maintenance window: set %s=%s to have it done now",
			queueableList(), v1alpha1.OperationAnnotation, value)
	}
	if op.Force {
		// It would skip the old-CA usage gate for whatever depends on the
		// old CAs when the window opens, not what was looked at when it
		// was asked for.
		return op, fmt.Errorf("a forced operation does not wait for the maintenance window: it overrides a safety check with what is "+
			"known when it is asked for; set %s=%s to have it done now", v1alpha1.OperationAnnotation, value)
	}
	return op, nil
}

// queueable are the verbs that may wait for the maintenance window.
var queueable = []v1alpha1.OperationVerb{
	v1alpha1.VerbStartCARotation, v1alpha1.VerbCompleteCARotation,
	v1alpha1.VerbRotateServiceAccountKeyStart, v1alpha1.VerbRotateServiceAccountKeyComplete,
	v1alpha1.VerbRotateCredentialsStart, v1alpha1.VerbRotateCredentialsComplete,
}

func queueableList() string {
	names := make([]string, len(queueable))
	for i, v := range queueable {
		names[i] = string(v)
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// Validate checks, for the admission webhook, a Cluster's maintenance
// window and its queued maintenance operation.
func Validate(c *v1alpha1.Cluster) field.ErrorList {
	return slices.Concat(validateWindow(c), validateQueueable(c), requireWindow(c))
}

// ValidateUpdate is Validate for an update, of what it changes only: a
// window or a queued operation stored while the webhook was off, or under
// looser rules, must not block the writes that leave it alone, the Cluster
// controller's own among them (removing carousel.dev/operation, and cutting
// a queued rotate-credentials-start to what is left of it). A queued
// operation needs a window when it is added or replaced by another than
// such a remainder, or the window is removed. No operation is queued on a
// Cluster being deleted, as none is accepted on it (rotation.ValidateOperation).
func ValidateUpdate(newC, oldC *v1alpha1.Cluster) field.ErrorList {
	var errs field.ErrorList
	windowChanged := !equality.Semantic.DeepEqual(newC.Spec.Maintenance, oldC.Spec.Maintenance)
	if windowChanged {
		errs = validateWindow(newC)
	}
	newQueued, newOK := newC.Annotations[v1alpha1.MaintenanceOperationAnnotation]
	oldQueued, oldOK := oldC.Annotations[v1alpha1.MaintenanceOperationAnnotation]
	queuedChanged := newOK && (!oldOK || newQueued != oldQueued)
	if queuedChanged && oldC.DeletionTimestamp != nil {
		return append(errs, field.Forbidden(queuedPath, "the cluster is being deleted: no operation is accepted"))
	}
	if queuedChanged {
		errs = append(errs, validateQueueable(newC)...)
	}
	cut := oldOK && partOf(newQueued, oldQueued) // what the Cluster controller writes: no window needed
	if windowChanged || queuedChanged && !cut {
		errs = append(errs, requireWindow(newC)...)
	}
	return errs
}

// partOf reports whether value is one of the two parts of queued, a
// rotate-credentials verb: what the Cluster controller cuts it to once the
// other part was done by hand (Left).
func partOf(value, queued string) bool {
	op, err := v1alpha1.ParseOperation(queued)
	if err != nil || value == queued {
		return false
	}
	verb := v1alpha1.OperationVerb(value)
	return verb != "" && (verb == op.Verb.CAVerb() || verb == op.Verb.ServiceAccountKeyVerb())
}

var queuedPath = field.NewPath("metadata", "annotations").Key(v1alpha1.MaintenanceOperationAnnotation)

var windowPath = field.NewPath("spec", "maintenance", "timeWindow")

func validateWindow(c *v1alpha1.Cluster) field.ErrorList {
	if m := c.Spec.Maintenance; m != nil {
		if _, err := ParseWindow(m.TimeWindow.Begin, m.TimeWindow.End); err != nil {
			return field.ErrorList{field.Invalid(windowPath, m.TimeWindow, err.Error())}
		}
	}
	return nil
}

// validateQueueable checks that the queued operation, if any, may wait for
// the window (Queueable).
func validateQueueable(c *v1alpha1.Cluster) field.ErrorList {
	value, ok := c.Annotations[v1alpha1.MaintenanceOperationAnnotation]
	if !ok {
		return nil
	}
	if _, err := Queueable(value); err != nil {
		return field.ErrorList{field.Invalid(queuedPath, value, err.Error())}
	}
	return nil
}

// requireWindow checks that a queued operation, if any, has a window to
// wait for.
func requireWindow(c *v1alpha1.Cluster) field.ErrorList {
	value, ok := c.Annotations[v1alpha1.MaintenanceOperationAnnotation]
	if !ok || c.Spec.Maintenance != nil {
		return nil
	}
	return field.ErrorList{field.Required(windowPath, fmt.Sprintf("%s=%s waits for the maintenance window: set one, or set %s=%s to have it done now",
		v1alpha1.MaintenanceOperationAnnotation, value, v1alpha1.OperationAnnotation, value))}
}
