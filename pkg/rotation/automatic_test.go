package rotation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

func TestAutomatic(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	at := func(days int) *metav1.Time { return &metav1.Time{Time: created.AddDate(0, 0, days)} }
	ca := func(role v1alpha1.CARole, fromDay, days int) v1alpha1.CertificateAuthorityInventory {
		return v1alpha1.CertificateAuthorityInventory{Role: role, Current: &v1alpha1.CertificateInfo{
			NotBefore: *at(fromDay), NotAfter: metav1.NewTime(at(fromDay).Add(time.Duration(days) * day))}}
	}
	// The defaults (80 %) on CAs valid 1,000 days: due at day 800.
	fresh := []v1alpha1.CertificateAuthorityInventory{ca(v1alpha1.CARoleCluster, 0, 1000), ca(v1alpha1.CARoleKubelet, 0, 1000)}
	prepared := &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationFinishedTime: at(10), OldCAUsage: &v1alpha1.OldCAUsage{}}
	inUse := prepared.DeepCopy()
	inUse.OldCAUsage = &v1alpha1.OldCAUsage{Total: 2, Dependents: []v1alpha1.OldCADependent{
		{Kind: v1alpha1.OldCADependentNode, Name: "w1"}, {Kind: v1alpha1.OldCADependentUser, Name: "ci-robot"}}}
	notEvaluated := prepared.DeepCopy()
	notEvaluated.OldCAUsage = nil

	for _, tc := range []struct {
		name   string
		policy *v1alpha1.AutomaticCARotation
		rot    *v1alpha1.CARotation
		cas    []v1alpha1.CertificateAuthorityInventory
		want   string // the operation; "" for none
		due    time.Time
		why    []string
		// waiting: what holds a due step
		waiting string
	}{
		{name: "no policy", cas: fresh},
		{name: "never rotated: 80% of the validity by default", policy: &v1alpha1.AutomaticCARotation{}, cas: fresh,
			want: v1alpha1.OperationStartCARotation, due: created.AddDate(0, 0, 800),
			why: []string{"the cluster CA, valid from 2026-01-01T00:00:00Z to 2028-09-27T00:00:00Z, has used 80% of its validity at 2028-03-11T00:00:00Z"}},
		{name: "the CA that reaches the share first decides", policy: &v1alpha1.AutomaticCARotation{ValidityUsedPercent: ptr.To[int32](50)},
			cas:  []v1alpha1.CertificateAuthorityInventory{ca(v1alpha1.CARoleCluster, 0, 1000), ca(v1alpha1.CARoleEtcd, 100, 200)},
			want: v1alpha1.OperationStartCARotation, due: created.AddDate(0, 0, 200), why: []string{"the etcd CA", "has used 50% of its validity"}},
		{name: "a role without a current CA is skipped", policy: &v1alpha1.AutomaticCARotation{},
			cas:  []v1alpha1.CertificateAuthorityInventory{{Role: v1alpha1.CARoleVPN}, ca(v1alpha1.CARoleCluster, 0, 1000)},
			want: v1alpha1.OperationStartCARotation, due: created.AddDate(0, 0, 800), why: []string{"the cluster CA"}},
		{name: "no CA issued yet, no interval: nothing", policy: &v1alpha1.AutomaticCARotation{}},
		{name: "aborted: nothing, although the CAs are due", policy: &v1alpha1.AutomaticCARotation{ValidityUsedPercent: ptr.To[int32](1)},
			rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationAborted, LastAbortTime: at(20)}, cas: fresh},
		{name: "the interval comes first, from the creation", policy: &v1alpha1.AutomaticCARotation{Interval: &metav1.Duration{Duration: 90 * day}},
			cas: fresh, want: v1alpha1.OperationStartCARotation, due: created.AddDate(0, 0, 90),
			why: []string{"the Cluster was created at 2026-01-01T00:00:00Z and never rotated; spec.caRotation.automatic.interval is 2160h0m0s"}},
		{name: "the interval, from the last completion", policy: &v1alpha1.AutomaticCARotation{Interval: &metav1.Duration{Duration: 90 * day}},
			rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationCompleted, LastCompletionTime: at(100)},
			cas: fresh, want: v1alpha1.OperationStartCARotation, due: created.AddDate(0, 0, 190),
			why: []string{"the last rotation completed at 2026-04-11T00:00:00Z"}},
		{name: "the validity comes before the interval", policy: &v1alpha1.AutomaticCARotation{Interval: &metav1.Duration{Duration: 1000 * day}},
			rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationCompleted, LastCompletionTime: at(100)},
			cas: fresh, want: v1alpha1.OperationStartCARotation, due: created.AddDate(0, 0, 800), why: []string{"has used 80%"}},
		{name: "preparing: nothing", policy: &v1alpha1.AutomaticCARotation{CompleteAfter: &metav1.Duration{}},
			rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing}, cas: fresh},
		{name: "waiting for held pools: nothing, the user releases them", policy: &v1alpha1.AutomaticCARotation{CompleteAfter: &metav1.Duration{}},
			rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationWaitingForWorkersRollout}, cas: fresh},
		{name: "finalizing: nothing", policy: &v1alpha1.AutomaticCARotation{Interval: &metav1.Duration{Duration: time.Hour}},
			rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationFinalizing}, cas: fresh},
		{name: "prepared without completeAfter: the user completes", policy: &v1alpha1.AutomaticCARotation{}, rot: prepared, cas: fresh},
		{name: "prepared: complete after the soak", policy: &v1alpha1.AutomaticCARotation{CompleteAfter: &metav1.Duration{Duration: 7 * day}},
			rot: prepared, cas: fresh, want: v1alpha1.OperationCompleteCARotation, due: created.AddDate(0, 0, 17),
			why: []string{"Prepared since 2026-01-11T00:00:00Z for spec.caRotation.automatic.completeAfter (168h0m0s)"}},
		{name: "prepared: the soak is over, but the old CAs are in use", policy: &v1alpha1.AutomaticCARotation{CompleteAfter: &metav1.Duration{Duration: 7 * day}},
			rot: inUse, cas: fresh, want: v1alpha1.OperationCompleteCARotation, due: created.AddDate(0, 0, 17),
			waiting: "2 clients still depend on the old CAs: Node w1, User ci-robot"},
		{name: "prepared: the soak is over, the gate not evaluated yet", policy: &v1alpha1.AutomaticCARotation{CompleteAfter: &metav1.Duration{}},
			rot: notEvaluated, cas: fresh, want: v1alpha1.OperationCompleteCARotation, due: created.AddDate(0, 0, 10),
			waiting: "not evaluated yet"},
		{name: "prepared without its time (written by hand): nothing", policy: &v1alpha1.AutomaticCARotation{CompleteAfter: &metav1.Duration{}},
			rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared}, cas: fresh},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step := Automatic(tc.policy, tc.rot, tc.cas, created)
			if step.Operation != tc.want {
				t.Fatalf("operation %q, want %q (%+v)", step.Operation, tc.want, step)
			}
			if tc.want == "" {
				if step.DueAt(created.AddDate(100, 0, 0)) {
					t.Fatalf("nothing scheduled, yet due: %+v", step)
				}
				return
			}
			if !step.Due.Equal(tc.due) {
				t.Fatalf("due at %s, want %s", step.Due, tc.due)
			}
			if !strings.Contains(step.Waiting, tc.waiting) || (tc.waiting == "") != (step.Waiting == "") {
				t.Fatalf("waiting %q, want …%s…", step.Waiting, tc.waiting)
			}
			if tc.waiting != "" {
				if step.DueAt(tc.due.AddDate(1, 0, 0)) {
					t.Fatalf("due although it waits: %+v", step)
				}
				return
			}
			if step.DueAt(tc.due.Add(-time.Second)) || !step.DueAt(tc.due) {
				t.Fatalf("DueAt around %s is wrong", tc.due)
			}
			for _, part := range tc.why {
				if !strings.Contains(step.Why, part) {
					t.Errorf("why %q lacks %q", step.Why, part)
				}
			}
		})
	}
}

// FuzzAutomatic checks, for any phase, CAs and policy, that a start is
// scheduled only outside a rotation (and not after an abort), never later than a CA's share of its
// validity or the interval, and a complete only in Prepared, the soak after
// it became Prepared, and never while the old-CA usage gate is closed.
func FuzzAutomatic(f *testing.F) {
	f.Add(uint8(0), uint8(80), int64(1000), int64(10), int64(0), int64(-1), int64(-1))
	f.Add(uint8(2), uint8(50), int64(48), int64(0), int64(200), int64(24), int64(7))
	f.Add(uint8(8), uint8(50), int64(48), int64(0), int64(200), int64(24), int64(7))
	f.Fuzz(func(t *testing.T, phaseIndex, percent uint8, validityHours, startHours, completedHours, intervalHours, soakHours int64) {
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		hours := func(h int64) time.Duration { return time.Duration(h%(1<<20)) * time.Hour }
		rot := &v1alpha1.CARotation{Phase: fuzzPhase(phaseIndex), LastCompletionTime: &metav1.Time{Time: base.Add(hours(completedHours))},
			LastInitiationFinishedTime: &metav1.Time{Time: base.Add(hours(completedHours) / 2)}}
		from := base.Add(hours(startHours))
		cas := []v1alpha1.CertificateAuthorityInventory{{Role: v1alpha1.CARoleCluster,
			Current: &v1alpha1.CertificateInfo{NotBefore: metav1.NewTime(from), NotAfter: metav1.NewTime(from.Add(hours(validityHours)))}}}
		policy := &v1alpha1.AutomaticCARotation{ValidityUsedPercent: ptr.To(int32(percent%99) + 1)}
		if intervalHours >= 0 {
			policy.Interval = &metav1.Duration{Duration: hours(intervalHours)}
		}
		if soakHours >= 0 {
			policy.CompleteAfter = &metav1.Duration{Duration: hours(soakHours)}
		}
		if gate := validityHours & 3; gate > 0 { // 0: not evaluated; 1: clear; 2, 3: dependents
			rot.OldCAUsage = &v1alpha1.OldCAUsage{Total: int32(gate / 2)}
		}
		step := Automatic(policy, rot, cas, base)
		switch phase := rot.Phase; {
		case phase == v1alpha1.RotationPrepared:
			if blocked := rot.OldCAUsage == nil || rot.OldCAUsage.Total > 0; blocked && step.DueAt(base.AddDate(1000, 0, 0)) {
				t.Fatalf("a completion came due although the old-CA usage gate is closed (%+v): %+v", rot.OldCAUsage, step)
			}
			if policy.CompleteAfter == nil {
				if step.Operation != "" {
					t.Fatalf("Prepared without completeAfter scheduled %+v", step)
				}
				return
			}
			completeAfter, _ := policy.CompleteAfterOrNone()
			if step.Operation != v1alpha1.OperationCompleteCARotation || !step.Due.Equal(rot.LastInitiationFinishedTime.Add(completeAfter)) {
				t.Fatalf("Prepared scheduled %+v", step)
			}
		case phase.RotationInProgress(), phase == v1alpha1.RotationAborted:
			if step.Operation != "" {
				t.Fatalf("phase %s scheduled %+v", phase, step)
			}
		default:
			validity := cas[0].Current.NotAfter.Sub(from)
			if validity <= 0 && policy.Interval == nil {
				if step.Operation != "" {
					t.Fatalf("nothing to go by, yet scheduled %+v", step)
				}
				return
			}
			if step.Operation != v1alpha1.OperationStartCARotation {
				t.Fatalf("phase %q scheduled %+v", phase, step)
			}
			if validity > 0 && step.Due.After(from.Add(validity/100*time.Duration(policy.ValidityUsedPercentOrDefault()))) {
				t.Fatalf("due at %s, after the CA used its share", step.Due)
			}
			// The interval as it takes effect: within its bounds (boundedOr).
			if interval, set := policy.IntervalOrNone(); set && step.Due.After(rot.LastCompletionTime.Add(interval)) && phase == v1alpha1.RotationCompleted {
				t.Fatalf("due at %s, after the interval", step.Due)
			}
			if step.Why == "" {
				t.Fatal("no reason given")
			}
		}
	})
}
