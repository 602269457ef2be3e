package v1alpha1

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// CARotation returns the CA rotation status, or nil when there is none.
func (c *Cluster) CARotation() *CARotation {
	if c.Status.Credentials == nil || c.Status.Credentials.Rotation == nil {
		return nil
	}
	return c.Status.Credentials.Rotation.CertificateAuthorities
}

// CARotationID identifies the CA rotation under way by its
// lastInitiationTime, the AnnotationRotation value of the CA Secrets it
// generates; it is empty when no rotation is under way.
func (c *Cluster) CARotationID() string {
	rot := c.CARotation()
	if rot == nil || !rot.Phase.RotationInProgress() || rot.LastInitiationTime == nil {
		return ""
	}
	return rot.LastInitiationTime.UTC().Format(time.RFC3339)
}

// CredentialsIssued reports whether the status inventory lists a CA of
// every role: the Cluster's credentials were issued once. Until then the
// Cluster controller defers an operation that starts a CA rotation.
func (c *Cluster) CredentialsIssued() bool {
	if c.Status.Credentials == nil {
		return false
	}
	for _, role := range CARoles() {
		if !slices.ContainsFunc(c.Status.Credentials.CertificateAuthorities, func(inv CertificateAuthorityInventory) bool { return inv.Role == role && inv.Current != nil }) {
			return false
		}
	}
	return true
}

// CARotationPhase returns the phase of the CA rotation; empty when the
// Cluster was never rotated.
func (c *Cluster) CARotationPhase() CARotationPhase {
	if r := c.CARotation(); r != nil {
		return r.Phase
	}
	return ""
}

// ServiceAccountKeyRotation returns the service-account key rotation
// status, or nil when there is none.
func (c *Cluster) ServiceAccountKeyRotation() *ServiceAccountKeyRotation {
	if c.Status.Credentials == nil || c.Status.Credentials.Rotation == nil {
		return nil
	}
	return c.Status.Credentials.Rotation.ServiceAccountKey
}

// ServiceAccountKeyRotationPhase returns the phase of the service-account key
// rotation; empty when the key was never rotated.
func (c *Cluster) ServiceAccountKeyRotationPhase() ServiceAccountKeyRotationPhase {
	if r := c.ServiceAccountKeyRotation(); r != nil {
		return r.Phase
	}
	return ""
}

// RotationInProgress reports whether a service-account key rotation has
// started and not completed.
func (p ServiceAccountKeyRotationPhase) RotationInProgress() bool {
	return p == ServiceAccountKeyPreparing || p == ServiceAccountKeyPrepared || p == ServiceAccountKeyFinalizing
}

// RotationInProgress reports whether a CA rotation has started and not completed.
func (p CARotationPhase) RotationInProgress() bool {
	return p.BothCAsTrusted() || p == RotationFinalizing || p == RotationAborting
}

// Preparing reports whether phase 1 of a CA rotation is at work: Preparing,
// or PreparingWithoutWorkersRollout. Both mint the new CAs, move the clients
// to them and wait for the same steps; they differ only in the worker pools
// they roll.
func (p CARotationPhase) Preparing() bool {
	return p == RotationPreparing || p == RotationPreparingWithoutWorkersRollout
}

// BothCAsTrusted reports whether the rotation is in phase 1 or waits after
// it: every trust bundle holds the old and the new CA, clients move to the
// new CA and servers stay on the old one.
func (p CARotationPhase) BothCAsTrusted() bool {
	return p.Preparing() || p == RotationWaitingForWorkersRollout || p == RotationPrepared
}

// IsPendingWorkerPool reports whether the pool's rollout is still awaited.
func (c *Cluster) IsPendingWorkerPool(name string) bool {
	return c.pendingWorkerPool(name) != nil
}

// IsHeldWorkerPool reports whether the pool's rollout waits for
// rotate-rollout-workers to name it.
func (c *Cluster) IsHeldWorkerPool(name string) bool {
	p := c.pendingWorkerPool(name)
	return p != nil && p.Held
}

func (c *Cluster) pendingWorkerPool(name string) *PendingWorkersRollout {
	if r := c.CARotation(); r != nil {
		for i := range r.PendingWorkersRollouts {
			if r.PendingWorkersRollouts[i].Name == name {
				return &r.PendingWorkersRollouts[i]
			}
		}
	}
	return nil
}

// WorkerPool returns the named worker pool, or nil.
func (s *ClusterSpec) WorkerPool(name string) *WorkerPool {
	for i := range s.Workers {
		if s.Workers[i].Name == name {
			return &s.Workers[i]
		}
	}
	return nil
}

// RollsInPlace reports whether the pool's node agents renew its nodes in
// place: the InPlace strategy, the default.
func (p *WorkerPool) RollsInPlace() bool {
	return p.RolloutStrategy == "" || p.RolloutStrategy == RolloutInPlace
}

// MaxUnavailableOrDefault returns the pool's maxUnavailable, or DefaultMaxUnavailable when unset.
func (p *WorkerPool) MaxUnavailableOrDefault() intstr.IntOrString {
	if p.MaxUnavailable != nil {
		return *p.MaxUnavailable
	}
	return DefaultMaxUnavailable
}

// OfflineNodeTimeoutOrDefault returns the pool's offlineNodeTimeout, or DefaultOfflineNodeTimeout when unset,
// within [MinOfflineNodeTimeout, MaxOfflineNodeTimeout] (see boundedOr): below the time between two Lease
// renewals, every node would count as offline, the pool as rolled without any of them, and the old CAs would be
// dropped under them.
func (p *WorkerPool) OfflineNodeTimeoutOrDefault() time.Duration {
	return boundedOr(p.OfflineNodeTimeout, DefaultOfflineNodeTimeout, MinOfflineNodeTimeout, MaxOfflineNodeTimeout)
}

// ValidityUsedPercentOrDefault returns validityUsedPercent, or
// DefaultAutomaticValidityUsedPercent when unset.
func (a *AutomaticCARotation) ValidityUsedPercentOrDefault() int32 {
	if a.ValidityUsedPercent == nil {
		return DefaultAutomaticValidityUsedPercent
	}
	return *a.ValidityUsedPercent
}

// WorkloadTrustReloadOrDefault returns the workloadTrustReload, or DefaultWorkloadTrustReload when unset,
// within [0, MaxWorkloadTrustReload] (see boundedOr).
func (r *CARotationSettings) WorkloadTrustReloadOrDefault() time.Duration {
	return boundedOr(r.WorkloadTrustReload, DefaultWorkloadTrustReload, 0, MaxWorkloadTrustReload)
}

// WorkloadTokenRefreshOrDefault returns the workloadTokenRefresh, or
// DefaultWorkloadTokenRefresh when unset.
// Within [0, MaxWorkloadTokenRefresh] (see boundedOr).
func (r *ServiceAccountKeyRotationSettings) WorkloadTokenRefreshOrDefault() time.Duration {
	return boundedOr(r.WorkloadTokenRefresh, DefaultWorkloadTokenRefresh, 0, MaxWorkloadTokenRefresh)
}

// KeyAlgorithmOrDefault returns the key algorithm, or DefaultKeyAlgorithm when unset.
func (cs *CertificateSettings) KeyAlgorithmOrDefault() KeyAlgorithm {
	if cs.KeyAlgorithm == "" {
		return DefaultKeyAlgorithm
	}
	return cs.KeyAlgorithm
}

// CAValidityOrDefault returns the CA validity, or DefaultCAValidity when unset, within [MinCAValidity,
// MaxCAValidity] (see boundedOr): a CA of minutes would have every certificate of the Cluster expire with it.
func (cs *CertificateSettings) CAValidityOrDefault() time.Duration {
	return boundedOr(cs.CAValidity, DefaultCAValidity, MinCAValidity, MaxCAValidity)
}

// LeafValidityOrDefault returns the leaf validity, or DefaultLeafValidity when unset, within
// [MinLeafValidity, MaxLeafValidity] (see boundedOr): a leaf of minutes would be due for renewal as soon as
// issued, and every pass would issue all of them again and roll the control plane.
func (cs *CertificateSettings) LeafValidityOrDefault() time.Duration {
	return boundedOr(cs.LeafValidity, DefaultLeafValidity, MinLeafValidity, MaxLeafValidity)
}

// TokenTTLOrDefault returns the bootstrap token TTL, or DefaultBootstrapTokenTTL when unset, within
// [MinBootstrapTokenTTL, MaxBootstrapTokenTTL] (see boundedOr): a token that expires at once would be replaced
// at every pass and never be usable, and one of years would let whoever holds it join nodes for as long.
func (kb *KubeletBootstrapSpec) TokenTTLOrDefault() time.Duration {
	return boundedOr(kb.TokenTTL, DefaultBootstrapTokenTTL, MinBootstrapTokenTTL, MaxBootstrapTokenTTL)
}

// IntervalOrNone returns the automatic rotation's interval, within [MinAutomaticRotationInterval,
// MaxCAValidity] (see boundedOr), and whether it is set: an interval of nothing would start a rotation as soon as
// the last one completed.
func (a *AutomaticCARotation) IntervalOrNone() (time.Duration, bool) {
	return boundedOr(a.Interval, 0, MinAutomaticRotationInterval, MaxCAValidity), a.Interval != nil
}

// CompleteAfterOrNone returns the automatic rotation's completeAfter, within [0, MaxAutomaticCompleteAfter]
// (see boundedOr), and whether it is set.
func (a *AutomaticCARotation) CompleteAfterOrNone() (time.Duration, bool) {
	return boundedOr(a.CompleteAfter, 0, 0, MaxAutomaticCompleteAfter), a.CompleteAfter != nil
}

// boundedOr is d, or def when d is unset, within [lo, hi]. The webhook refuses a duration outside the bounds;
// one written where it did not see it (webhook.enabled=false, failurePolicy Ignore) counts as the nearer bound,
// so that no spec makes the controllers loop, drop trust early, or issue credentials for decades.
func boundedOr(d *metav1.Duration, def, lo, hi time.Duration) time.Duration {
	return min(max(durationOr(d, def), lo), hi)
}

func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}
