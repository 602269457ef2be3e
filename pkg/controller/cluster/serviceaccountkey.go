package cluster

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// serviceAccountKeyPhase moves the service-account key Secret through a
// rotation (rotation.DecideServiceAccountKey), each step once the consumers
// rolled out the one before, and records the phase reached. The Secret's
// update event starts the pass that rolls the consumers onto the step.
func (r *Reconciler) serviceAccountKeyPhase(ctx context.Context, s *scope) error {
	c := s.cluster
	rot := c.ServiceAccountKeyRotation()
	name := credentials.ServiceAccountKeySecretName(c.Name)
	secret := s.objs.secrets[name]
	if !c.ServiceAccountKeyRotationPhase().RotationInProgress() || secret == nil {
		return nil
	}
	key, err := credentials.ParseServiceAccountKey(secret.Data)
	if err != nil {
		return fmt.Errorf("service-account key Secret %s: %w", name, err)
	}
	id := rotation.ServiceAccountKeyRotationID(rot)
	facts := rotation.ServiceAccountKeyFacts{Phase: rot.Phase, Stage: key.Stage(),
		StagedInThisRotation: secret.Annotations[v1alpha1.AnnotationRotation] == id, ConsumersRolledOut: s.rolledOut,
		WorkloadTokenRefresh: c.Spec.ServiceAccountKeyRotation.WorkloadTokenRefreshOrDefault(), Now: r.Clock.Now()}
	if rot.NewKeySigningTime != nil {
		facts.NewKeySigning = rot.NewKeySigningTime.Time
	}
	if rotation.TokenSecretsCheckDue(facts) {
		if facts.TokenSecrets, facts.TokenSecretsBehind, err = r.reissueTokenSecrets(ctx, s, key); err != nil {
			return err
		}
		if next := rotation.RecordNewKeySigning(rot, facts, r.now()); next != rot {
			setServiceAccountKeyRotation(c, next)
			rot, facts.NewKeySigning = next, next.NewKeySigningTime.Time
		}
	}
	d := rotation.DecideServiceAccountKey(facts)
	want := desiredSecret{name: name, labels: credentials.ClusterLabels(c.Name)}
	switch d.Write {
	case credentials.ServiceAccountKeyStaged:
		next, err := pki.GenerateKey(pki.KeyAlgorithm(c.Spec.Certificates.KeyAlgorithmOrDefault()))
		if err != nil {
			return err
		}
		key, want.annotations = key.Staged(next), map[string]string{v1alpha1.AnnotationRotation: id}
	case credentials.ServiceAccountKeySwitched:
		key = key.Switched()
	case credentials.ServiceAccountKeySingle:
		key = key.PreviousDropped()
	}
	if d.Write != "" {
		if want.data, err = key.Data(); err != nil {
			return err
		}
		if err := r.writeSecret(ctx, c, s.objs, want); err != nil {
			return err
		}
	}
	if d.Phase != rot.Phase {
		setServiceAccountKeyRotation(c, rotation.EnterServiceAccountKeyPhase(rot, d.Phase, r.now()))
	}
	s.keyDecision = &d
	return nil
}

// keyEndpointRemovedCondition says that the service-account key rotation
// holds because its endpoint was removed from the spec (past the webhook,
// which refuses that) before its check of the token Secrets passed.
func keyEndpointRemovedCondition(c *v1alpha1.Cluster) *metav1.Condition {
	return heldForTheEndpoint("the service-account key rotation", string(c.ServiceAccountKeyRotationPhase()), "its check of the token Secrets",
		c.ServiceAccountKeyRotation().CheckedEndpoint)
}

// reissueTokenSecrets has the managed cluster's service-account token Secrets
// re-issued with the key's signing key (evidence.Checker.TokenSecretsBehind)
// and reports what it saw: Skipped without an endpoint, Pending while Secrets
// lag behind, the API server cannot be reached (the ControlPlaneReachable
// condition says so, and the poll backs off) or the endpoint a rotation
// recorded was removed.
func (r *Reconciler) reissueTokenSecrets(ctx context.Context, s *scope, key *credentials.ServiceAccountKey) (rotation.Evidence, []string, error) {
	c := s.cluster
	endpoint := c.Spec.ControlPlane.Endpoint
	switch {
	case s.keyEndpointRemoved:
		return rotation.EvidencePending, nil, s.observe(keyEndpointRemovedCondition(c), nil)
	case s.endpointRemoved:
		return rotation.EvidencePending, nil, s.observe(endpointRemovedCondition(c), nil)
	case endpoint == "" || r.Evidence == nil:
		return rotation.EvidenceSkipped, nil, nil
	}
	keyID, err := credentials.ServiceAccountKeyID(key.Signing.Public())
	if err != nil {
		return "", nil, err
	}
	operator := s.objs.secrets[credentials.CertificateSecretName(c.Name, credentials.CertOperator)]
	behind, err := r.Evidence.TokenSecretsBehind(ctx, endpoint, s.trust[v1alpha1.CARoleCluster],
		operator.Data[v1alpha1.DataKeyCertificate], operator.Data[v1alpha1.DataKeyPrivateKey], keyID)
	if err != nil {
		return rotation.EvidencePending, nil, s.observe(unreachable("", err), errManagedCheckFailed)
	}
	_ = s.observe(reachability(metav1.ConditionTrue, v1alpha1.ReasonEndpointReachable, "the API server lists its service-account token Secrets"), nil)
	if len(behind) > 0 {
		return rotation.EvidencePending, behind, nil
	}
	return rotation.EvidencePassed, nil, nil
}
