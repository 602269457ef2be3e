package v1alpha1

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every bounded duration of the spec, read through its helper: unset is the
// default, a value within the webhook's bounds is itself, and one outside
// them (written where the webhook did not see it) is the nearer bound.
func TestBoundedDurations(t *testing.T) {
	helpers := []struct {
		name        string
		read        func(*metav1.Duration) time.Duration
		def, lo, hi time.Duration
	}{
		{"tokenTTL", func(d *metav1.Duration) time.Duration {
			return (&KubeletBootstrapSpec{TokenTTL: d}).TokenTTLOrDefault()
		}, DefaultBootstrapTokenTTL, MinBootstrapTokenTTL, MaxBootstrapTokenTTL},
		{"offlineNodeTimeout", func(d *metav1.Duration) time.Duration {
			return (&WorkerPool{OfflineNodeTimeout: d}).OfflineNodeTimeoutOrDefault()
		}, DefaultOfflineNodeTimeout, MinOfflineNodeTimeout, MaxOfflineNodeTimeout},
		{"caValidity", func(d *metav1.Duration) time.Duration {
			return (&CertificateSettings{CAValidity: d}).CAValidityOrDefault()
		}, DefaultCAValidity, MinCAValidity, MaxCAValidity},
		{"leafValidity", func(d *metav1.Duration) time.Duration {
			return (&CertificateSettings{LeafValidity: d}).LeafValidityOrDefault()
		}, DefaultLeafValidity, MinLeafValidity, MaxLeafValidity},
		{"workloadTrustReload", func(d *metav1.Duration) time.Duration {
			return (&CARotationSettings{WorkloadTrustReload: d}).WorkloadTrustReloadOrDefault()
		}, DefaultWorkloadTrustReload, 0, MaxWorkloadTrustReload},
		{"workloadTokenRefresh", func(d *metav1.Duration) time.Duration {
			return (&ServiceAccountKeyRotationSettings{WorkloadTokenRefresh: d}).WorkloadTokenRefreshOrDefault()
		}, DefaultWorkloadTokenRefresh, 0, MaxWorkloadTokenRefresh},
		{"progressDeadline", func(d *metav1.Duration) time.Duration {
			return (&RotationCampaignSpec{ProgressDeadline: d}).ProgressDeadlineOrDefault()
		}, DefaultCampaignProgressDeadline, MinCampaignProgressDeadline, MaxCampaignProgressDeadline},
		{"automatic.interval", func(d *metav1.Duration) time.Duration {
			return orUnset((&AutomaticCARotation{Interval: d}).IntervalOrNone())
		}, unset, MinAutomaticRotationInterval, MaxCAValidity},
		{"automatic.completeAfter", func(d *metav1.Duration) time.Duration {
			return orUnset((&AutomaticCARotation{CompleteAfter: d}).CompleteAfterOrNone())
		}, unset, 0, MaxAutomaticCompleteAfter},
	}
	for _, h := range helpers {
		t.Run(h.name, func(t *testing.T) {
			within := h.lo + (h.hi-h.lo)/2
			for _, tt := range []struct {
				name string
				d    *metav1.Duration
				want time.Duration
			}{
				{"unset", nil, h.def},
				{"within the bounds", &metav1.Duration{Duration: within}, within},
				{"the least", &metav1.Duration{Duration: h.lo}, h.lo},
				{"the most", &metav1.Duration{Duration: h.hi}, h.hi},
				{"negative, past the webhook", &metav1.Duration{Duration: -time.Hour}, h.lo},
				{"below the least, past the webhook", &metav1.Duration{Duration: h.lo - time.Second}, h.lo},
				{"centuries, past the webhook", &metav1.Duration{Duration: 2_000_000 * time.Hour}, h.hi},
			} {
				if got := h.read(tt.d); got != tt.want {
					t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
				}
			}
		})
	}
}

// unset stands, in TestBoundedDurations, for a duration a helper reports as
// not set; orUnset is v, or unset when not set.
const unset time.Duration = -1

func orUnset(v time.Duration, set bool) time.Duration {
	if !set {
		return unset
	}
	return v
}
