package cluster

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// rotationID identifies the rotation under way by its lastInitiationTime; it
// is empty when no rotation is under way.
func rotationID(c *v1alpha1.Cluster) string {
	rot := c.CARotation()
	if rot == nil || !rot.Phase.RotationInProgress() || rot.LastInitiationTime == nil {
		return ""
	}
	return rot.LastInitiationTime.UTC().Format(time.RFC3339)
}

// ensureCAs gives every role a CA Secret and, in Preparing, a new CA that
// belongs to this rotation, keeping the old one as previous. A CA is written
// (and so persisted) in the same step that generates it, before anything is
// signed with it; a restarted reconcile finds it by its rotation annotation
// and never generates a second one. A Secret that cannot be read is an error,
// never a reason to replace a CA, and a CA the status lists is never
// generated again unless a reissue-ca operation allowed it (confirmCAMissing).
func (r *Reconciler) ensureCAs(ctx context.Context, c *v1alpha1.Cluster, objs *objects) (map[v1alpha1.CARole]*credentials.CAs, error) {
	phase, id := c.CARotationPhase(), rotationID(c)
	all := make(map[v1alpha1.CARole]*credentials.CAs, len(v1alpha1.CARoles()))
	for _, role := range v1alpha1.CARoles() {
		name := credentials.CASecretName(c.Name, role)
		existing := objs.secrets[name]
		var (
			cas     *credentials.CAs
			data    map[string][]byte
			created bool
		)
		if existing == nil {
			// Checked before a key is generated: a lost, unlabelled or
			// not-yet-cached CA is never replaced.
			if err := r.confirmCAMissing(ctx, c, role); err != nil {
				return nil, err
			}
			kp, err := r.newCA(c, role)
			if err != nil {
				return nil, err
			}
			cas, created = &credentials.CAs{Current: kp, Rotation: id}, true
		} else {
			decoded, err := credentials.DecodeCASecret(existing)
			if err != nil {
				return nil, err
			}
			cas, data = decoded, existing.Data
			if phase == v1alpha1.RotationPreparing && cas.Rotation != id {
				if cas.Previous != nil {
					return nil, fmt.Errorf("secret %s still holds the previous CA of an earlier rotation; refusing to replace it", name)
				}
				kp, err := r.newCA(c, role)
				if err != nil {
					return nil, err
				}
				cas, data, created = &credentials.CAs{Current: kp, Previous: decoded.Current, Rotation: id}, nil, true
			}
		}
		if data == nil {
			var err error
			if data, err = credentials.EncodeCASecretData(cas); err != nil {
				return nil, err
			}
		}
		var annotations map[string]string
		if cas.Rotation != "" {
			annotations = map[string]string{credentials.AnnotationRotation: cas.Rotation}
		}
		if err := r.writeSecret(ctx, c, objs, desiredSecret{
			name: name, labels: credentials.CALabels(c.Name, role), annotations: annotations, data: data,
		}); err != nil {
			return nil, err
		}
		if created {
			r.event(c, corev1.EventTypeNormal, v1alpha1.EventCAGenerated, "Generated %s CA %s", role, pki.Fingerprint(cas.Current.Cert))
		}
		all[role] = cas
	}
	return all, nil
}

func (r *Reconciler) newCA(c *v1alpha1.Cluster, role v1alpha1.CARole) (*pki.KeyPair, error) {
	key, err := pki.GenerateKey(pki.KeyAlgorithm(c.Spec.Certificates.KeyAlgorithmOrDefault()))
	if err != nil {
		return nil, err
	}
	now := r.Clock.Now()
	return pki.NewCA(pki.CATemplate{
		CommonName:   fmt.Sprintf("carousel-%s-ca@%d", role, now.Unix()),
		Organization: []string{v1alpha1.GroupName},
		Validity:     c.Spec.Certificates.CAValidityOrDefault(),
	}, key, now)
}

// dropOldCAs deletes the previous CA, key and certificate, of every role.
func (r *Reconciler) dropOldCAs(ctx context.Context, c *v1alpha1.Cluster, objs *objects, all map[v1alpha1.CARole]*credentials.CAs) error {
	for _, role := range v1alpha1.CARoles() {
		cas := all[role]
		if cas.Previous == nil {
			continue
		}
		old := cas.Previous
		kept := &credentials.CAs{Current: cas.Current, Rotation: cas.Rotation}
		data, err := credentials.EncodeCASecretData(kept)
		if err != nil {
			return err
		}
		name := credentials.CASecretName(c.Name, role)
		if err := r.writeSecret(ctx, c, objs, desiredSecret{
			name: name, labels: credentials.CALabels(c.Name, role),
			annotations: map[string]string{credentials.AnnotationRotation: cas.Rotation}, data: data,
		}); err != nil {
			return err
		}
		all[role] = kept
		r.event(c, corev1.EventTypeNormal, v1alpha1.EventCARemoved, "Removed old %s CA %s", role, pki.Fingerprint(old.Cert))
	}
	return nil
}

// ensureServiceAccountKey creates the service-account signing key once; it is
// not part of the CA rotation and never regenerated.
func (r *Reconciler) ensureServiceAccountKey(ctx context.Context, c *v1alpha1.Cluster, objs *objects) error {
	name := credentials.ServiceAccountKeySecretName(c.Name)
	existing := objs.secrets[name]
	if existing != nil {
		return r.writeSecret(ctx, c, objs, desiredSecret{name: name, labels: credentials.ClusterLabels(c.Name), data: existing.Data})
	}
	key, err := pki.GenerateKey(pki.KeyAlgorithm(c.Spec.Certificates.KeyAlgorithmOrDefault()))
	if err != nil {
		return err
	}
	keyPEM, err := pki.EncodePrivateKey(key)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	return r.writeSecret(ctx, c, objs, desiredSecret{name: name, labels: credentials.ClusterLabels(c.Name), data: map[string][]byte{
		credentials.DataKeyServiceAccountKey:       keyPEM,
		credentials.DataKeyServiceAccountPublicKey: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}),
	}})
}
