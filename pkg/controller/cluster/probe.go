package cluster

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

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

func (r *Reconciler) deleteOldClientProbe(ctx context.Context, c *v1alpha1.Cluster, objs *objects) error {
	s := objs.secrets[oldClientProbeSecret(c)]
	if s == nil {
		return nil
	}
	if err := r.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %s: %w", s.Name, err)
	}
	delete(objs.secrets, s.Name)
	return nil
}

// apiServerTrustsNewClientCA is, in Preparing and with an endpoint, the
// observed half of "every consumer trusts both CAs": the API server accepts
// a short-lived client certificate from the new client CA. Carousel's own
// client certificate moves only after that, and once it has moved, the
// question is settled. Elsewhere it is true: the consumers' rollout says it.
func (r *Reconciler) apiServerTrustsNewClientCA(ctx context.Context, c *v1alpha1.Cluster, objs *objects,
	all map[v1alpha1.CARole]*credentials.CAs, trust bundles) bool {
	endpoint := c.Spec.ControlPlane.Endpoint
	clientCAs := all[v1alpha1.CARoleClient]
	if c.CARotationPhase() != v1alpha1.RotationPreparing || endpoint == "" || r.Evidence == nil || clientCAs.Previous == nil {
		r.trustProbes.Delete(client.ObjectKeyFromObject(c))
		return true
	}
	if s := objs.secrets[credentials.CertificateSecretName(c.Name, credentials.CertOperator)]; s != nil {
		if certs, err := pki.ParseCertificates(s.Data[v1alpha1.DataKeyCertificate]); err == nil && signedBy(certs[0], clientCAs.Current.Cert) {
			return true
		}
	}
	probe, err := r.trustProbe(c, clientCAs.Current)
	if err == nil {
		err = r.Evidence.ClientAccepted(ctx, endpoint, trust[v1alpha1.CARoleCluster], probe.certPEM, probe.keyPEM)
	}
	if err != nil {
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionControlPlaneReachable,
			Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonEndpointUnreachable, ObservedGeneration: c.Generation, LastTransitionTime: r.now(),
			Message: "the API server does not accept the new client CA yet: " + err.Error()})
		return false
	}
	return true
}

// trustProbeValidity is the lifetime of a trust probe certificate; it is
// issued anew with half of it left. Its user has no permissions.
const trustProbeValidity = time.Hour

// trustProbe is a client certificate from the new client CA, kept in memory
// for the Preparing phase of one Cluster.
type trustProbe struct {
	ca              string // fingerprint of the CA that signed it
	notAfter        time.Time
	certPEM, keyPEM []byte
}

// trustProbe returns the Cluster's probe certificate from ca, issuing one
// only when there is none from that CA with half its life left.
func (r *Reconciler) trustProbe(c *v1alpha1.Cluster, ca *pki.KeyPair) (*trustProbe, error) {
	fingerprint, now := pki.Fingerprint(ca.Cert), r.Clock.Now()
	if v, ok := r.trustProbes.Load(client.ObjectKeyFromObject(c)); ok {
		if p := v.(*trustProbe); p.ca == fingerprint && p.notAfter.Sub(now) > trustProbeValidity/2 {
			return p, nil
		}
	}
	kp, err := ca.IssueKeyPair(pki.LeafTemplate{
		CommonName: "carousel:trust-probe", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: trustProbeValidity,
	}, pki.KeyAlgorithm(c.Spec.Certificates.KeyAlgorithmOrDefault()), now)
	if err != nil {
		return nil, err
	}
	keyPEM, err := kp.KeyPEM()
	if err != nil {
		return nil, err
	}
	p := &trustProbe{ca: fingerprint, notAfter: kp.Cert.NotAfter, certPEM: kp.CertPEM(), keyPEM: keyPEM}
	r.trustProbes.Store(client.ObjectKeyFromObject(c), p)
	return p, nil
}

// gatherEvidence observes the managed API server once every other fact of
// the phase holds, and records what it saw in the ControlPlaneReachable
// condition. Without an endpoint the checks are skipped, and the condition
// says so.
func (r *Reconciler) gatherEvidence(ctx context.Context, c *v1alpha1.Cluster, objs *objects, trust bundles, f rotation.Facts) rotation.Evidence {
	cond := metav1.Condition{Type: v1alpha1.ConditionControlPlaneReachable, ObservedGeneration: c.Generation, LastTransitionTime: r.now()}
	defer func() { meta.SetStatusCondition(&c.Status.Conditions, cond) }()
	endpoint := c.Spec.ControlPlane.Endpoint
	if endpoint == "" || r.Evidence == nil {
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonNoEndpoint
		cond.Message = "spec.controlPlane.endpoint is empty: the API-server checks of a CA rotation are skipped"
		return rotation.EvidenceSkipped
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
			return rotation.EvidencePassed
		}
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionUnknown, v1alpha1.ReasonEndpointReachable, "no check due in this step"
		if existing := meta.FindStatusCondition(c.Status.Conditions, cond.Type); existing != nil {
			cond = *existing
		}
		return rotation.EvidencePending
	}
	if err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonEndpointUnreachable, err.Error()
		return rotation.EvidencePending
	}
	cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, v1alpha1.ReasonEndpointReachable, "the API server behaves as the phase requires"
	return rotation.EvidencePassed
}
