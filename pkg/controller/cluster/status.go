package cluster

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// updateInventory records every role's CAs (never key material), the
// earliest CA expiry, and the CAExpiringSoon condition.
func (r *Reconciler) updateInventory(c *v1alpha1.Cluster, all map[v1alpha1.CARole]*credentials.CAs) {
	if c.Status.Credentials == nil {
		c.Status.Credentials = &v1alpha1.ClusterCredentials{}
	}
	inventory := make([]v1alpha1.CertificateAuthorityInventory, 0, len(all))
	var earliest *metav1.Time
	var earliestRole v1alpha1.CARole
	for _, role := range v1alpha1.CARoles() {
		entry := v1alpha1.CertificateAuthorityInventory{
			Role: role, Current: credentials.CertificateInfo(all[role].Current), Previous: credentials.CertificateInfo(all[role].Previous),
		}
		for _, info := range []*v1alpha1.CertificateInfo{entry.Current, entry.Previous} {
			if info != nil && (earliest == nil || info.NotAfter.Before(earliest)) {
				earliest, earliestRole = info.NotAfter.DeepCopy(), role
			}
		}
		inventory = append(inventory, entry)
	}
	c.Status.Credentials.CertificateAuthorities = inventory
	c.Status.Credentials.EarliestCAExpiry = earliest

	cond := metav1.Condition{Type: v1alpha1.ConditionCAExpiring, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonCAValid,
		Message: fmt.Sprintf("no CA expires within %s", r.CAExpiryWarning), ObservedGeneration: c.Generation, LastTransitionTime: r.now()}
	if earliest != nil && earliest.Sub(r.Clock.Now()) < r.CAExpiryWarning {
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonCAExpiring
		cond.Message = fmt.Sprintf("the %s CA expires at %s: start a CA rotation with %s=%s",
			earliestRole, earliest.UTC().Format("2006-01-02T15:04:05Z"), v1alpha1.OperationAnnotation, v1alpha1.OperationStartCARotation)
		if !meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionCAExpiring) {
			r.event(c, "Warning", v1alpha1.EventCAExpiringSoon, "%s", cond.Message)
		}
	}
	meta.SetStatusCondition(&c.Status.Conditions, cond)
}

// setRotationCondition says whether a rotation is under way and what it waits for.
func (r *Reconciler) setRotationCondition(c *v1alpha1.Cluster, phase v1alpha1.CARotationPhase, wait *rotation.Wait, waitingPools []string) {
	cond := metav1.Condition{Type: v1alpha1.ConditionCARotation, Status: metav1.ConditionFalse, Reason: rotation.ReasonNoRotation,
		Message: "no CA rotation is under way", ObservedGeneration: c.Generation, LastTransitionTime: r.now()}
	if phase.RotationInProgress() && wait != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, wait.Reason, fmt.Sprintf("%s: %s", phase, wait.Message)
		if wait.Reason == rotation.ReasonWaitingForWorkers && len(waitingPools) > 0 {
			cond.Message += "; " + strings.Join(waitingPools, "; ")
		}
	}
	meta.SetStatusCondition(&c.Status.Conditions, cond)
}
