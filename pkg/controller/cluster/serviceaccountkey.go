package cluster

import (
	"context"
	"fmt"

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
	d := rotation.DecideServiceAccountKey(rotation.ServiceAccountKeyFacts{Phase: rot.Phase, Stage: key.Stage(),
		StagedInThisRotation: secret.Annotations[v1alpha1.AnnotationRotation] == id, ConsumersRolledOut: s.rolledOut})
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
