package maintenance

import (
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

func TestDecide(t *testing.T) {
	window := &v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{Begin: "220000+0000", End: "230000+0000"}}
	inside := time.Date(2026, 11, 24, 22, 30, 0, 0, time.UTC)
	outside := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	opening := time.Date(2026, 11, 24, 22, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		value   string
		spec    *v1alpha1.MaintenanceSpec
		phase   v1alpha1.CARotationPhase
		saPhase v1alpha1.ServiceAccountKeyRotationPhase
		now     time.Time
		run     bool
		reason  string
		message string
		next    time.Time
	}{
		{name: "start inside the window", value: v1alpha1.OperationStartCARotation, spec: window, now: inside, run: true},
		{name: "complete inside the window, Prepared", value: v1alpha1.OperationCompleteCARotation, spec: window,
			phase: v1alpha1.RotationPrepared, now: inside, run: true},
		{name: "start outside the window", value: v1alpha1.OperationStartCARotation, spec: window, now: outside,
			reason: v1alpha1.ReasonWaitingForMaintenanceWindow, message: "start-ca-rotation waits for the maintenance window, which opens next at 2026-11-24T22:00:00Z", next: opening},
		{name: "complete inside the window, still Preparing", value: v1alpha1.OperationCompleteCARotation, spec: window,
			phase: v1alpha1.RotationPreparing, now: inside, reason: v1alpha1.ReasonMaintenanceOperationNotAllowed,
			message: "complete-ca-rotation waits until the rotation's phase allows it: cannot complete the CA rotation in phase Preparing"},
		{name: "start inside the window, a rotation under way", value: v1alpha1.OperationStartCARotation, spec: window,
			phase: v1alpha1.RotationFinalizing, now: inside, reason: v1alpha1.ReasonMaintenanceOperationNotAllowed, message: "cannot start a CA rotation"},
		{name: "no window", value: v1alpha1.OperationStartCARotation, now: inside, reason: v1alpha1.ReasonNoMaintenanceWindow,
			message: "set spec.maintenance.timeWindow"},
		{name: "a window too short (webhook bypassed)", value: v1alpha1.OperationStartCARotation, now: inside,
			spec:   &v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{Begin: "220000+0000", End: "221000+0000"}},
			reason: v1alpha1.ReasonNoMaintenanceWindow, message: "lasts 10m0s"},
		{name: "an operation that does not wait", value: v1alpha1.OperationRolloutWorkersPrefix + "a", spec: window, now: inside,
			reason: v1alpha1.ReasonInvalidMaintenanceOperation, message: "only start-ca-rotation, complete-ca-rotation, rotate-serviceaccount-key-start, rotate-serviceaccount-key-complete, " +
				"rotate-credentials-start and rotate-credentials-complete wait for the maintenance window"},
		{name: "rotate-credentials-complete inside the window, the key still Preparing", value: string(v1alpha1.VerbRotateCredentialsComplete), spec: window,
			phase: v1alpha1.RotationPrepared, saPhase: v1alpha1.ServiceAccountKeyPreparing, now: inside, reason: v1alpha1.ReasonMaintenanceOperationNotAllowed,
			message: "cannot complete the service-account key rotation in phase Preparing, only in phase Prepared"},
		{name: "rotate-credentials-complete inside the window, both Prepared", value: string(v1alpha1.VerbRotateCredentialsComplete), spec: window,
			phase: v1alpha1.RotationPrepared, saPhase: v1alpha1.ServiceAccountKeyPrepared, now: inside, run: true},
		{name: "not an operation", value: "rotate-everything", spec: window, now: inside,
			reason: v1alpha1.ReasonInvalidMaintenanceOperation, message: `unknown operation "rotate-everything"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.value, tc.spec, rotation.Phases{CA: tc.phase, ServiceAccountKey: tc.saPhase}, tc.now)
			if d.Run != tc.run || d.Reason != tc.reason || !d.Next.Equal(tc.next) {
				t.Fatalf("Decide = %+v, want run %t, reason %q, next %s", d, tc.run, tc.reason, tc.next)
			}
			if !strings.Contains(d.Message, tc.message) {
				t.Errorf("message %q lacks %q", d.Message, tc.message)
			}
			if tc.run && d.Message != "" {
				t.Errorf("a run has the message %q", d.Message)
			}
		})
	}
}
