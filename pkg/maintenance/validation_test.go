package maintenance

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

func TestValidate(t *testing.T) {
	cluster := func(spec *v1alpha1.MaintenanceSpec, annotation string) *v1alpha1.Cluster {
		c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: v1alpha1.ClusterSpec{Maintenance: spec}}
		if annotation != "" {
			c.Annotations = map[string]string{v1alpha1.MaintenanceOperationAnnotation: annotation}
		}
		return c
	}
	window := &v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{Begin: "220000+0000", End: "230000+0000"}}
	for _, tc := range []struct {
		name string
		c    *v1alpha1.Cluster
		errs []string
	}{
		{name: "no maintenance at all", c: cluster(nil, "")},
		{name: "a window", c: cluster(window, "")},
		{name: "a queued start", c: cluster(window, v1alpha1.OperationStartCARotation)},
		{name: "a queued complete", c: cluster(window, v1alpha1.OperationCompleteCARotation)},
		{name: "a queued forced complete", c: cluster(window, v1alpha1.OperationCompleteCARotation+v1alpha1.OperationForceSuffix),
			errs: []string{"a forced operation does not wait for the maintenance window", "set carousel.dev/operation=complete-ca-rotation=force to have it done now"}},
		{name: "a queued abort", c: cluster(window, v1alpha1.OperationAbortCARotation),
			errs: []string{"only start-ca-rotation, complete-ca-rotation, rotate-serviceaccount-key-start"}},
		{name: "a queued start without a window", c: cluster(nil, v1alpha1.OperationStartCARotation),
			errs: []string{"spec.maintenance.timeWindow: Required value: carousel.dev/maintenance-operation=start-ca-rotation waits for the maintenance window: set one, or set carousel.dev/operation=start-ca-rotation to have it done now"}},
		{name: "a queued reissue", c: cluster(window, v1alpha1.OperationReissueServiceAccountKey),
			errs: []string{"metadata.annotations[carousel.dev/maintenance-operation]: Invalid value: \"reissue-service-account-key\": only start-ca-rotation, complete-ca-rotation, rotate-serviceaccount-key-start"}},
		{name: "a window too long", c: cluster(&v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{Begin: "120000+0000", End: "230000+0000"}}, ""),
			errs: []string{"spec.maintenance.timeWindow: Invalid value", "lasts 11h0m0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := Validate(tc.c)
			if len(tc.errs) == 0 {
				if len(errs) != 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			got := errs.ToAggregate()
			if got == nil {
				t.Fatalf("admitted, want %v", tc.errs)
			}
			for _, want := range tc.errs {
				if !strings.Contains(got.Error(), want) {
					t.Errorf("%q lacks %q", got.Error(), want)
				}
			}
		})
	}
}

// An update is checked for what it changes: a window or queued operation
// stored while the webhook was off (or under looser rules) does not block
// the writes that leave it alone, such as the Cluster controller removing
// carousel.dev/operation from a Cluster in a rotation.
func TestValidateUpdateChecksWhatChanges(t *testing.T) {
	tooShort := &v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{Begin: "220000+0000", End: "221000+0000"}}
	window := &v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{Begin: "220000+0000", End: "230000+0000"}}
	cluster := func(spec *v1alpha1.MaintenanceSpec, annotations map[string]string) *v1alpha1.Cluster {
		return &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Annotations: annotations}, Spec: v1alpha1.ClusterSpec{Maintenance: spec}}
	}
	deleting := func(c *v1alpha1.Cluster) *v1alpha1.Cluster {
		c.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC)}
		return c
	}
	queued := func(value string) map[string]string {
		return map[string]string{v1alpha1.MaintenanceOperationAnnotation: value, v1alpha1.OperationAnnotation: v1alpha1.OperationReconcile}
	}
	for _, tc := range []struct {
		name     string
		old, new *v1alpha1.Cluster
		want     string // empty: admitted
	}{
		{"an invalid window left alone", cluster(tooShort, queued(v1alpha1.OperationStartCARotation)), cluster(tooShort, nil), ""},
		{"an invalid queued operation left alone", cluster(window, queued(v1alpha1.OperationAbortCARotation)),
			cluster(window, map[string]string{v1alpha1.MaintenanceOperationAnnotation: v1alpha1.OperationAbortCARotation}), ""},
		{"an invalid window written", cluster(window, nil), cluster(tooShort, nil), "spec.maintenance.timeWindow"},
		{"an invalid queued operation written", cluster(window, nil),
			cluster(window, map[string]string{v1alpha1.MaintenanceOperationAnnotation: v1alpha1.OperationAbortCARotation}), "only start-ca-rotation"},
		{"an empty queued operation added", cluster(window, nil), cluster(window, map[string]string{v1alpha1.MaintenanceOperationAnnotation: ""}), "maintenance-operation"},
		// The Cluster controller cuts a queued rotate-credentials-start to
		// what is left of it, with a window removed while the webhook was off.
		{"a queued operation cut to its remainder without a window", cluster(nil, queued(string(v1alpha1.VerbRotateCredentialsStart))),
			cluster(nil, map[string]string{v1alpha1.MaintenanceOperationAnnotation: string(v1alpha1.VerbRotateServiceAccountKeyStart)}), ""},
		{"a queued operation added without a window", cluster(nil, nil), cluster(nil, queued(v1alpha1.OperationStartCARotation)), "waits for the maintenance window"},
		{"a queued operation replaced without a window", cluster(nil, queued(v1alpha1.OperationStartCARotation)),
			cluster(nil, queued(v1alpha1.OperationCompleteCARotation)), "waits for the maintenance window"},
		{"a queued operation replaced by a part it does not have without a window", cluster(nil, queued(string(v1alpha1.VerbRotateCredentialsStart))),
			cluster(nil, queued(string(v1alpha1.VerbRotateServiceAccountKeyComplete))), "waits for the maintenance window"},
		{"a queued operation replaced with a window", cluster(window, queued(v1alpha1.OperationStartCARotation)),
			cluster(window, queued(v1alpha1.OperationCompleteCARotation)), ""},
		{"a queued operation added to a Cluster being deleted", deleting(cluster(window, nil)),
			deleting(cluster(window, queued(v1alpha1.OperationStartCARotation))), "being deleted"},
		{"a queued operation removed from a Cluster being deleted", deleting(cluster(window, queued(v1alpha1.OperationStartCARotation))),
			deleting(cluster(window, nil)), ""},
		{"a queued operation left alone on a Cluster being deleted", deleting(cluster(window, queued(v1alpha1.OperationStartCARotation))),
			deleting(cluster(window, map[string]string{v1alpha1.MaintenanceOperationAnnotation: v1alpha1.OperationStartCARotation})), ""},
		{"the window removed under a queued operation", cluster(window, queued(v1alpha1.OperationStartCARotation)),
			cluster(nil, queued(v1alpha1.OperationStartCARotation)), "waits for the maintenance window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateUpdate(tc.new, tc.old).ToAggregate()
			switch {
			case tc.want == "" && errs != nil:
				t.Fatalf("refused: %v", errs)
			case tc.want != "" && (errs == nil || !strings.Contains(errs.Error(), tc.want)):
				t.Fatalf("got %v, want a refusal naming %q", errs, tc.want)
			}
		})
	}
}
