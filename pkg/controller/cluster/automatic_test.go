package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// The AutomaticCARotationScheduled condition, and when the Cluster is looked
// at again, for each state of a policy's next operation.
func TestSetAutomaticCondition(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	interval := 48 * time.Hour
	due := created.Add(interval) // 2026-01-03T00:00Z
	window := &v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{Begin: "220000+0000", End: "230000+0000"}}
	opening := due.Add(22 * time.Hour)
	cluster := func(policy *v1alpha1.AutomaticCARotation, rot *v1alpha1.CARotation, annotations map[string]string) *v1alpha1.Cluster {
		c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created), Annotations: annotations},
			Spec: v1alpha1.ClusterSpec{Maintenance: window, CARotation: v1alpha1.CARotationSettings{Automatic: policy}}}
		if rot != nil {
			c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: rot}}
		}
		return c
	}
	every := &v1alpha1.AutomaticCARotation{Interval: &metav1.Duration{Duration: interval}}
	for _, tc := range []struct {
		name    string
		c       *v1alpha1.Cluster
		now     time.Time
		status  metav1.ConditionStatus // "" when the condition must be absent
		reason  string
		message string
		next    time.Time
		// awaitsNodes: the old-CA usage gate's verdict, in this process,
		// waits for the managed cluster's Nodes to be read.
		awaitsNodes bool
	}{
		{name: "no policy", c: cluster(nil, nil, nil), now: due},
		{name: "not due yet", c: cluster(every, nil, nil), now: due.Add(-time.Hour), status: metav1.ConditionTrue,
			reason: v1alpha1.ReasonAutomaticOperationScheduled, message: "start-ca-rotation is due at 2026-01-03T00:00:00Z, and runs in the first maintenance window", next: due},
		{name: "due, the window closed", c: cluster(every, nil, nil), now: due.Add(time.Hour), status: metav1.ConditionTrue,
			reason: v1alpha1.ReasonWaitingForMaintenanceWindow, message: "opens next at 2026-01-03T22:00:00Z", next: opening},
		{name: "due in the open window during this pass: looked at again at once", c: cluster(every, nil, nil), now: opening.Add(time.Minute),
			status: metav1.ConditionTrue, reason: v1alpha1.ReasonAutomaticOperationScheduled, message: "and runs now", next: opening.Add(time.Minute)},
		{name: "due in the open window, an operation pending: its handling brings the Cluster back",
			c: cluster(every, nil, map[string]string{v1alpha1.OperationAnnotation: v1alpha1.OperationReconcile}), now: opening.Add(time.Minute),
			status: metav1.ConditionTrue, reason: v1alpha1.ReasonAutomaticOperationScheduled, message: "runs once the operation pending on the Cluster is handled"},
		{name: "due in the open window, a complete queued for the rotation it starts: the start runs now",
			c: cluster(every, nil, map[string]string{v1alpha1.MaintenanceOperationAnnotation: v1alpha1.OperationCompleteCARotation}), now: opening.Add(time.Minute),
			status: metav1.ConditionTrue, reason: v1alpha1.ReasonAutomaticOperationScheduled, message: "and runs now", next: opening.Add(time.Minute)},
		{name: "due in the open window, a start queued: it comes first",
			c: cluster(every, nil, map[string]string{v1alpha1.MaintenanceOperationAnnotation: v1alpha1.OperationStartCARotation}), now: opening.Add(time.Minute),
			status: metav1.ConditionTrue, reason: v1alpha1.ReasonAutomaticOperationScheduled, message: "runs once the operation pending on the Cluster is handled"},
		{name: "due in the open window, a forced complete queued (never run): the start runs now",
			c: cluster(every, nil, map[string]string{v1alpha1.MaintenanceOperationAnnotation: v1alpha1.OperationCompleteCARotation + "=force"}), now: opening.Add(time.Minute),
			status: metav1.ConditionTrue, reason: v1alpha1.ReasonAutomaticOperationScheduled, message: "and runs now", next: opening.Add(time.Minute)},
		{name: "prepared, no completeAfter", c: cluster(every, &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationFinishedTime: &metav1.Time{Time: due}}, nil),
			now: opening, status: metav1.ConditionFalse, reason: v1alpha1.ReasonNothingScheduled, message: "completeAfter is not set"},
		{name: "prepared with completeAfter, without its time", c: cluster(&v1alpha1.AutomaticCARotation{CompleteAfter: &metav1.Duration{}},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared}, nil),
			now: opening, status: metav1.ConditionFalse, reason: v1alpha1.ReasonNothingScheduled, message: "nothing is scheduled while the rotation is in phase Prepared"},
		{name: "finalizing", c: cluster(every, &v1alpha1.CARotation{Phase: v1alpha1.RotationFinalizing}, nil), now: opening,
			status: metav1.ConditionFalse, reason: v1alpha1.ReasonNothingScheduled, message: "in phase Finalizing"},
		{name: "prepared, the completion due in the open window, the gate's verdict waiting for the Nodes to be read: not at once",
			c: cluster(&v1alpha1.AutomaticCARotation{CompleteAfter: &metav1.Duration{Duration: time.Hour}}, &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared,
				LastInitiationTime: &metav1.Time{Time: due.Add(-time.Hour)}, LastInitiationFinishedTime: &metav1.Time{Time: due}, OldCAUsage: &v1alpha1.OldCAUsage{}}, nil),
			awaitsNodes: true, now: opening.Add(time.Minute), status: metav1.ConditionTrue, reason: v1alpha1.ReasonOldCADependents,
			message: "and waits for the old-CA usage gate: it has not read the managed cluster's Nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{Clock: clocktesting.NewFakeClock(tc.now)}
			if tc.awaitsNodes {
				r.verdicts.record(tc.c, nodesUnknown)
			}
			next := r.setAutomaticCondition(tc.c)
			cond := meta.FindStatusCondition(tc.c.Status.Conditions, v1alpha1.ConditionAutomaticCARotationScheduled)
			if tc.status == "" {
				if cond != nil {
					t.Fatalf("condition set without a policy: %+v", cond)
				}
				return
			}
			if cond == nil || cond.Status != tc.status || cond.Reason != tc.reason || !strings.Contains(cond.Message, tc.message) {
				t.Fatalf("condition %+v, want %s %s containing %q", cond, tc.status, tc.reason, tc.message)
			}
			if !next.Equal(tc.next) {
				t.Fatalf("looked at again at %s, want %s", next, tc.next)
			}
		})
	}
}

// A queued operation carried out on a Cluster that changed since it was read
// (the patch conflicts) is looked at again in a second, as any pass decided
// on a stale read, rather than failed with an error; the next pass carries
// it out.
func TestAQueuedOperationThatConflictsIsRetried(t *testing.T) {
	opening := time.Date(2026, 1, 3, 22, 1, 0, 0, time.UTC)
	c := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "queued",
			Annotations: map[string]string{v1alpha1.MaintenanceOperationAnnotation: v1alpha1.OperationStartCARotation}},
		Spec: v1alpha1.ClusterSpec{Maintenance: &v1alpha1.MaintenanceSpec{
			TimeWindow: v1alpha1.MaintenanceTimeWindow{Begin: "220000+0000", End: "230000+0000"}}},
	}
	conflicts := 1
	api := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(c).WithStatusSubresource(c).Build(), interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if conflicts > 0 {
				conflicts--
				return conflict(obj)
			}
			return cl.Patch(ctx, obj, patch, opts...)
		},
	})
	r := &Reconciler{Client: api, Clock: clocktesting.NewFakeClock(opening), Recorder: events.NewFakeRecorder(10)}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)}
	result, err := r.Reconcile(context.Background(), req)
	if err != nil || result.RequeueAfter != time.Second {
		t.Fatalf("result %+v, error %v; want a retry in a second", result, err)
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.Cluster{}
	if err := api.Get(context.Background(), req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations[v1alpha1.OperationAnnotation] != v1alpha1.OperationStartCARotation {
		t.Fatalf("annotations %v, want the queued start carried out", got.Annotations)
	}
}
