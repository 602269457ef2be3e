package rotation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

func TestRecommend(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(days int) *metav1.Time { return &metav1.Time{Time: created.AddDate(0, 0, days)} }
	day := 24 * time.Hour
	policy := RecommendationPolicy{RotationInterval: 90 * day, PreparedWarning: 7 * day}
	for _, tc := range []struct {
		name      string
		rot       *v1alpha1.CARotation
		scheduled AutomaticStep // what spec.caRotation.automatic schedules
		policy    RecommendationPolicy
		now       time.Time
		reason    string // "" for no recommendation
		message   []string
		next      time.Time
	}{
		{name: "never rotated, young", now: created.AddDate(0, 0, 89), policy: policy, next: created.AddDate(0, 0, 90)},
		{name: "never rotated, old", now: created.AddDate(0, 0, 90), policy: policy, reason: v1alpha1.ReasonRotationDue,
			message: []string{"created at 2026-01-01T00:00:00Z and its CAs were never rotated", "longer than 2160h0m0s ago", "carousel.dev/operation=start-ca-rotation"}},
		{name: "completed recently", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationCompleted, LastCompletionTime: at(100)},
			now: created.AddDate(0, 0, 150), policy: policy, next: created.AddDate(0, 0, 190)},
		{name: "completed long ago", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationCompleted, LastCompletionTime: at(100)},
			now: created.AddDate(0, 0, 190), policy: policy, reason: v1alpha1.ReasonRotationDue,
			message: []string{"the last CA rotation completed at 2026-04-11T00:00:00Z"}},
		{name: "rotation interval off", now: created.AddDate(10, 0, 0), policy: RecommendationPolicy{PreparedWarning: day}},
		{name: "preparing, however old", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, LastInitiationTime: at(1)},
			now: created.AddDate(5, 0, 0), policy: policy},
		{name: "finalizing, however old", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationFinalizing, LastInitiationFinishedTime: at(1)},
			now: created.AddDate(5, 0, 0), policy: policy},
		{name: "prepared recently", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationFinishedTime: at(200)},
			now: created.AddDate(0, 0, 206), policy: policy, next: created.AddDate(0, 0, 207)},
		{name: "prepared for too long", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationFinishedTime: at(200)},
			now: created.AddDate(0, 0, 207), policy: policy, reason: v1alpha1.ReasonCompletionDue,
			message: []string{"Prepared since 2026-07-20T00:00:00Z, longer than 168h0m0s", "carousel.dev/operation=complete-ca-rotation"}},
		// Carousel's own to take: recommended only once overdue by
		// AutomaticGrace (the maintenance window may be a day away).
		{name: "prepared for too long, its completion scheduled later", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationFinishedTime: at(200)},
			scheduled: AutomaticStep{Operation: v1alpha1.OperationCompleteCARotation, Due: at(230).Time},
			now:       created.AddDate(0, 0, 207), policy: policy, next: at(230).Add(AutomaticGrace)},
		{name: "prepared, its scheduled completion overdue", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationFinishedTime: at(200)},
			scheduled: AutomaticStep{Operation: v1alpha1.OperationCompleteCARotation, Due: at(207).Time},
			now:       at(207).Add(AutomaticGrace), policy: policy, reason: v1alpha1.ReasonCompletionDue},
		{name: "prepared for too long, its scheduled completion held by the gate", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationFinishedTime: at(200)},
			scheduled: AutomaticStep{Operation: v1alpha1.OperationCompleteCARotation, Due: at(230).Time, Waiting: "1 client still depends on the old CAs"},
			now:       created.AddDate(0, 0, 207), policy: policy, reason: v1alpha1.ReasonCompletionDue},
		{name: "prepared for too long, its completion scheduled earlier", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationFinishedTime: at(200)},
			scheduled: AutomaticStep{Operation: v1alpha1.OperationCompleteCARotation, Due: at(201).Time},
			now:       created.AddDate(0, 0, 206), policy: policy, next: created.AddDate(0, 0, 207)},
		{name: "never rotated, old, its start scheduled at 80% of a long validity", now: created.AddDate(0, 0, 90), policy: policy,
			scheduled: AutomaticStep{Operation: v1alpha1.OperationStartCARotation, Due: created.AddDate(8, 0, 0)}, next: created.AddDate(8, 0, 0).Add(AutomaticGrace)},
		{name: "prepared warning off", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationFinishedTime: at(200)},
			now: created.AddDate(5, 0, 0), policy: RecommendationPolicy{RotationInterval: day}},
		{name: "prepared without its time (hand-written status)", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared},
			now: created.AddDate(5, 0, 0), policy: policy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, next := Recommend(tc.rot, created, tc.scheduled, tc.policy, tc.now)
			if !next.Equal(tc.next) {
				t.Errorf("next = %v, want %v", next, tc.next)
			}
			if tc.reason == "" {
				if rec != nil {
					t.Fatalf("recommended %+v, want nothing", rec)
				}
				return
			}
			if rec == nil || rec.Reason != tc.reason {
				t.Fatalf("recommended %+v, want reason %s", rec, tc.reason)
			}
			for _, m := range tc.message {
				if !strings.Contains(rec.Message, m) {
					t.Errorf("message %q lacks %q", rec.Message, m)
				}
			}
			if advised := map[string]string{v1alpha1.ReasonRotationDue: v1alpha1.OperationStartCARotation,
				v1alpha1.ReasonCompletionDue: v1alpha1.OperationCompleteCARotation}[tc.reason]; !rec.FollowedBy(advised) {
				t.Errorf("the operation the message advises, %s, does not follow the recommendation", advised)
			}
		})
	}
}

// TestRecommendationFollowedBy: every form of the operation that acts on
// the advice silences it, and nothing else does.
func TestRecommendationFollowedBy(t *testing.T) {
	rotationDue := &Recommendation{Reason: v1alpha1.ReasonRotationDue}
	completionDue := &Recommendation{Reason: v1alpha1.ReasonCompletionDue}
	for _, tc := range []struct {
		operation                    string
		followsRotation, followsComp bool
	}{
		{"start-ca-rotation", true, false},
		{"start-ca-rotation-without-workers-rollout", true, false},
		{"rotate-credentials-start", true, false},
		{"complete-ca-rotation", false, true},
		{"complete-ca-rotation=force", false, true},
		{"rotate-credentials-complete", false, true},
		{"rotate-credentials-complete=force", false, true},
		{"abort-ca-rotation", false, true},
		{"rotate-serviceaccount-key-start", false, false},
		{"rotate-serviceaccount-key-complete", false, false},
		{"reconcile", false, false},
		{"rollout-workers=pool-a", false, false},
		{"", false, false},
		{"start-ca-rotation-please", false, false},
	} {
		if got := rotationDue.FollowedBy(tc.operation); got != tc.followsRotation {
			t.Errorf("a due rotation followed by %q: %t, want %t", tc.operation, got, tc.followsRotation)
		}
		if got := completionDue.FollowedBy(tc.operation); got != tc.followsComp {
			t.Errorf("a due completion followed by %q: %t, want %t", tc.operation, got, tc.followsComp)
		}
	}
}

// FuzzRecommend checks Recommend's invariants over phases, times and
// policies: a recommendation comes with no next time, a next time lies in
// the future, and at that time the recommendation is in force and stays so.
func FuzzRecommend(f *testing.F) {
	f.Add(uint8(0), int64(0), int64(100), int64(50), int64(90), int64(7))
	f.Add(uint8(2), int64(10), int64(30), int64(20), int64(0), int64(3))
	f.Add(uint8(4), int64(-5), int64(1000), int64(400), int64(90), int64(0))
	f.Fuzz(func(t *testing.T, phase uint8, createdHours, nowHours, eventHours, intervalHours, preparedHours int64) {
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		hours := func(h int64) time.Time { return base.Add(time.Duration(h%1_000_000) * time.Hour) }
		created, now, event := hours(createdHours), hours(nowHours), metav1.NewTime(hours(eventHours))
		policy := RecommendationPolicy{RotationInterval: time.Duration(intervalHours%100_000) * time.Hour,
			PreparedWarning: time.Duration(preparedHours%100_000) * time.Hour}
		rot := &v1alpha1.CARotation{Phase: fuzzPhase(phase), LastInitiationFinishedTime: &event, LastCompletionTime: &event}
		rec, next := Recommend(rot, created, AutomaticStep{}, policy, now)
		if rec != nil {
			if !next.IsZero() {
				t.Fatalf("recommended %q and a next time %v", rec.Reason, next)
			}
			if rec.Message == "" {
				t.Fatalf("recommendation %+v lacks a message", rec)
			}
			if rot.Phase.RotationInProgress() && rot.Phase != v1alpha1.RotationPrepared {
				t.Fatalf("recommended %q during %s", rec.Reason, rot.Phase)
			}
		}
		if next.IsZero() {
			return
		}
		if !next.After(now) {
			t.Fatalf("next %v is not after now %v", next, now)
		}
		for _, later := range []time.Time{next, next.Add(time.Hour), next.AddDate(1, 0, 0)} {
			if again, _ := Recommend(rot, created, AutomaticStep{}, policy, later); again == nil {
				t.Fatalf("nothing recommended at %v, after next %v", later, next)
			}
		}
	})
}
