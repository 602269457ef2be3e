package cluster

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// oldClientProbe is the certificate, signed by the old client CA just before
// it is dropped, with which Finalizing proves that the API server no longer
// accepts the old client CA. Its user has no permissions.
const oldClientProbe = "old-client-probe"

func oldClientProbeSecret(c *v1alpha1.Cluster) string {
	return credentials.CertificateSecretName(c.Name, oldClientProbe)
}

// ensureOldClientProbe signs the probe certificate with the old client CA,
// when there is an endpoint to probe.
func (r *Reconciler) ensureOldClientProbe(ctx context.Context, c *v1alpha1.Cluster, objs *objects, all map[v1alpha1.CARole]*credentials.CAs) error {
	old := all[v1alpha1.CARoleClient].Previous
	if c.Spec.ControlPlane.Endpoint == "" || old == nil || objs.secrets[oldClientProbeSecret(c)] != nil {
		return nil
	}
	kp, err := old.IssueKeyPair(pki.LeafTemplate{
		CommonName: "carousel:old-client-probe", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		Validity: c.Spec.Certificates.LeafValidityOrDefault(),
	}, pki.KeyAlgorithm(c.Spec.Certificates.KeyAlgorithmOrDefault()), r.Clock.Now())
	if err != nil {
		return err
	}
	keyPEM, err := kp.KeyPEM()
	if err != nil {
		return err
	}
	return r.writeSecret(ctx, c, objs, desiredSecret{
		name: oldClientProbeSecret(c),
		labels: map[string]string{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelCertificate: oldClientProbe,
			v1alpha1.LabelSignedBy: string(v1alpha1.CARoleClient)},
		data: map[string][]byte{v1alpha1.DataKeyCertificate: kp.CertPEM(), v1alpha1.DataKeyPrivateKey: keyPEM},
	})
}

// deleteSecret deletes one of the Cluster's Secrets, if it exists.
func (r *Reconciler) deleteSecret(ctx context.Context, objs *objects, name string) error {
	s := objs.secrets[name]
	if s == nil {
		return nil
	}
	if err := r.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %s: %w", s.Name, err)
	}
	delete(objs.secrets, s.Name)
	return nil
}

// trustProbeCert is the certificate, signed by the new client CA, with
// which Preparing checks that the managed API server accepts that CA before
// any client moves to it. Its user has no permissions. It is kept in a Secret
// for the whole phase, so that neither a pass that changes nothing nor a
// restarted operator generates a key, and deleted when the phase ends.
const trustProbeCert = "trust-probe"

func trustProbeSecret(c *v1alpha1.Cluster) string {
	return credentials.CertificateSecretName(c.Name, trustProbeCert)
}

// apiServerTrustsNewClientCA is, in Preparing and with an endpoint, the
// observed half of "every consumer trusts both CAs": the API server accepts
// a client certificate from the new client CA. Carousel's own client
// certificate moves only after that, and once it has moved, the question is
// settled. Elsewhere it is true: the consumers' rollout says it. The error
// is the failed check, for the poll's backoff; the condition says it too.
func (r *Reconciler) apiServerTrustsNewClientCA(ctx context.Context, c *v1alpha1.Cluster, objs *objects,
	all map[v1alpha1.CARole]*credentials.CAs, trust bundles, endpointRemoved bool) (bool, error) {
	endpoint := c.Spec.ControlPlane.Endpoint
	clientCAs := all[v1alpha1.CARoleClient]
	if c.CARotationPhase() != v1alpha1.RotationPreparing || r.Evidence == nil || clientCAs.Previous == nil {
		return true, nil
	}
	if endpointRemoved {
		setEndpointRemoved(c, r.now())
		return false, nil
	}
	if endpoint == "" {
		return true, nil
	}
	if s := objs.secrets[credentials.CertificateSecretName(c.Name, credentials.CertOperator)]; s != nil {
		if certs, err := pki.ParseCertificates(s.Data[v1alpha1.DataKeyCertificate]); err == nil && signedBy(certs[0], clientCAs.Current.Cert) {
			return true, nil
		}
	}
	probe, err := r.ensureTrustProbe(ctx, c, objs, clientCAs.Current)
	if err != nil {
		return false, err
	}
	if err := r.Evidence.ClientAccepted(ctx, endpoint, trust[v1alpha1.CARoleCluster], probe.Data[v1alpha1.DataKeyCertificate], probe.Data[v1alpha1.DataKeyPrivateKey]); err != nil {
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionControlPlaneReachable,
			Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonEndpointUnreachable, ObservedGeneration: c.Generation, LastTransitionTime: r.now(),
			Message: "the API server does not accept the new client CA yet: " + err.Error()})
		return false, errManagedCheckFailed
	}
	return true, nil
}

// errManagedCheckFailed marks a check of the managed cluster that failed (its
// condition says how); the reconcile goes on and polls with backoff.
var errManagedCheckFailed = errors.New("a check of the managed cluster failed")

// ensureTrustProbe returns the Secret holding the trust probe, issuing one
// only when there is none from ca (the Secret lives in the Cluster's
// namespace: a pair that does not chain to ca, or whose key does not match,
// is replaced).
func (r *Reconciler) ensureTrustProbe(ctx context.Context, c *v1alpha1.Cluster, objs *objects, ca *pki.KeyPair) (*corev1.Secret, error) {
	name := trustProbeSecret(c)
	if s := objs.secrets[name]; s != nil {
		if kp, err := pki.ParseKeyPair(s.Data[v1alpha1.DataKeyCertificate], s.Data[v1alpha1.DataKeyPrivateKey]); err == nil &&
			signedBy(kp.Cert, ca.Cert) && r.Clock.Now().Before(kp.Cert.NotAfter) {
			return s, nil
		}
	}
	kp, err := ca.IssueKeyPair(pki.LeafTemplate{
		CommonName: "carousel:trust-probe", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		Validity: c.Spec.Certificates.LeafValidityOrDefault(),
	}, pki.KeyAlgorithm(c.Spec.Certificates.KeyAlgorithmOrDefault()), r.Clock.Now())
	if err != nil {
		return nil, err
	}
	keyPEM, err := kp.KeyPEM()
	if err != nil {
		return nil, err
	}
	if err := r.writeSecret(ctx, c, objs, desiredSecret{
		name: name,
		labels: map[string]string{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelCertificate: trustProbeCert,
			v1alpha1.LabelSignedBy: string(v1alpha1.CARoleClient)},
		data: map[string][]byte{v1alpha1.DataKeyCertificate: kp.CertPEM(), v1alpha1.DataKeyPrivateKey: keyPEM},
	}); err != nil {
		return nil, err
	}
	return objs.secrets[name], nil
}

// setEndpointRemoved says that the rotation holds because its endpoint was
// removed from the spec (past the webhook, which refuses that).
func setEndpointRemoved(c *v1alpha1.Cluster, now metav1.Time) {
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionControlPlaneReachable,
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonEndpointRemoved, ObservedGeneration: c.Generation, LastTransitionTime: now,
		Message: fmt.Sprintf("spec.controlPlane.endpoint was removed during the CA rotation (phase %s), so its API-server checks cannot run: the rotation holds until the endpoint is set again (it was %s)",
			c.CARotationPhase(), c.CARotation().CheckedEndpoint)})
}

// gatherEvidence observes the managed API server once every other fact of
// the phase holds, and records what it saw in the ControlPlaneReachable
// condition. Without an endpoint the checks are skipped, and the condition
// says so.
func (r *Reconciler) gatherEvidence(ctx context.Context, c *v1alpha1.Cluster, objs *objects, trust bundles, f rotation.Facts, endpointRemoved bool) (rotation.Evidence, error) {
	if endpointRemoved {
		setEndpointRemoved(c, r.now())
		return rotation.EvidencePending, nil
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionControlPlaneReachable, ObservedGeneration: c.Generation, LastTransitionTime: r.now()}
	defer func() { meta.SetStatusCondition(&c.Status.Conditions, cond) }()
	endpoint := c.Spec.ControlPlane.Endpoint
	if endpoint == "" || r.Evidence == nil {
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonNoEndpoint
		cond.Message = "spec.controlPlane.endpoint is empty: the API-server checks of a CA rotation are skipped"
		return rotation.EvidenceSkipped, nil
	}
	operator := objs.secrets[credentials.CertificateSecretName(c.Name, credentials.CertOperator)]
	var err error
	switch {
	case f.Phase == v1alpha1.RotationPreparing && f.NewCAsPersisted && f.ClientsOnNewCA && f.ConsumersRolledOut && f.PendingWorkerPools == 0:
		err = r.Evidence.ClientAccepted(ctx, endpoint, trust[v1alpha1.CARoleCluster], operator.Data[v1alpha1.DataKeyCertificate], operator.Data[v1alpha1.DataKeyPrivateKey])
	case f.Phase == v1alpha1.RotationFinalizing && f.AllOnNewCA && f.OldCAsRemoved && f.ConsumersRolledOut && f.PendingWorkerPools == 0:
		err = r.Evidence.ServesChainTo(ctx, endpoint, trust[v1alpha1.CARoleCluster])
		probe := objs.secrets[oldClientProbeSecret(c)]
		if err == nil && probe != nil {
			err = r.Evidence.ClientRejected(ctx, endpoint, trust[v1alpha1.CARoleCluster], probe.Data[v1alpha1.DataKeyCertificate], probe.Data[v1alpha1.DataKeyPrivateKey])
		}
		if err == nil && probe == nil {
			cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonEndpointReachable
			cond.Message = "the API server serves a certificate from the new cluster CA; the old client CA's rejection was not checked: no probe certificate (the endpoint was set after the old CAs were dropped)"
			return rotation.EvidencePassed, nil
		}
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionUnknown, v1alpha1.ReasonEndpointReachable, "no check due in this step"
		if existing := meta.FindStatusCondition(c.Status.Conditions, cond.Type); existing != nil {
			cond = *existing
		}
		return rotation.EvidencePending, nil
	}
	if err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonEndpointUnreachable, err.Error()
		return rotation.EvidencePending, errManagedCheckFailed
	}
	cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, v1alpha1.ReasonEndpointReachable, "the API server behaves as the phase requires"
	return rotation.EvidencePassed, nil
}
