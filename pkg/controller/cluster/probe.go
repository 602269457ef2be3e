package cluster

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// ensureOldClientProbe keeps the probe certificate, signed by the old client
// CA, when there is an endpoint to probe. It is valid as long as that CA:
// issued once, before the CA's key is dropped, it must not expire while
// Finalizing rolls the consumers and the worker pools, for an API server
// refuses an expired certificate whichever CAs it trusts, and its refusal
// would prove nothing. An old CA expired already signs no probe (nor does
// any client of it authenticate): the rotation completes without one.
func (r *Reconciler) ensureOldClientProbe(ctx context.Context, c *v1alpha1.Cluster, objs *objects, all map[v1alpha1.CARole]*credentials.CAs) error {
	old := all[v1alpha1.CARoleClient].Previous
	if c.Spec.ControlPlane.Endpoint == "" || old == nil || !r.Clock.Now().Before(old.Cert.NotAfter) {
		return nil
	}
	_, err := r.ensureProbe(ctx, c, objs, old, oldClientProbe, old.Cert.NotAfter.Sub(r.Clock.Now()))
	return err
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
// a client certificate from the new client CA. Once the clients moved, the
// question is settled, and trustPhase does not ask it (clientsMoved).
// Elsewhere it is true: the consumers' rollout says it. It returns
// what it saw of the API server (nil: it did not look) and, for a check that
// failed, errManagedCheckFailed.
func (r *Reconciler) apiServerTrustsNewClientCA(ctx context.Context, c *v1alpha1.Cluster, objs *objects,
	all map[v1alpha1.CARole]*credentials.CAs, trust bundles, endpointRemoved bool) (bool, *metav1.Condition, error) {
	endpoint := c.Spec.ControlPlane.Endpoint
	clientCAs := all[v1alpha1.CARoleClient]
	switch {
	case !c.CARotationPhase().Preparing() || r.Evidence == nil || clientCAs.Previous == nil:
		return true, nil, nil
	case endpointRemoved:
		return false, endpointRemovedCondition(c), nil
	case endpoint == "":
		return true, nil, nil
	}
	probe, err := r.ensureProbe(ctx, c, objs, clientCAs.Current, trustProbeCert, c.Spec.Certificates.LeafValidityOrDefault())
	if err != nil {
		return false, nil, err
	}
	if err := r.Evidence.ClientAccepted(ctx, endpoint, trust[v1alpha1.CARoleCluster], probe.Data[v1alpha1.DataKeyCertificate], probe.Data[v1alpha1.DataKeyPrivateKey]); err != nil {
		return false, unreachable("the API server does not accept the new client CA yet: ", err), errManagedCheckFailed
	}
	return true, reachability(metav1.ConditionTrue, v1alpha1.ReasonEndpointReachable, "the API server accepts a client certificate from the new client CA"), nil
}

// clientsMoved reports whether, during a rotation, the clients moved to the
// new client CA already, which settles that everything trusts it: the
// rotation is Prepared or WaitingForWorkersRollout, which it reaches only
// once every client moved (rotation.Facts.ClientsOnNewCA), or Carousel's own
// client certificate is from the new client CA, which signs none before the
// API server accepted it, or, that Secret lost, another client certificate
// the client CA signs is. Not the phase alone: after rotate-rollout-workers
// the rotation is back in Preparing. One certificate is parsed a pass, as
// long as Carousel's own is there.
func clientsMoved(c *v1alpha1.Cluster, objs *objects, clientCAs *credentials.CAs) bool {
	if clientCAs.Previous == nil {
		return false
	}
	switch c.CARotationPhase() {
	case v1alpha1.RotationPrepared, v1alpha1.RotationWaitingForWorkersRollout:
		return true
	}
	onNewCA := func(s *corev1.Secret) bool {
		certs, err := pki.ParseCertificates(s.Data[v1alpha1.DataKeyCertificate])
		return err == nil && clientCAs.Issuer(certs[0]) == clientCAs.Current
	}
	if own := objs.secrets[credentials.CertificateSecretName(c.Name, credentials.CertOperator)]; own != nil {
		return onNewCA(own)
	}
	for _, cert := range credentials.Certificates(c) {
		s := objs.secrets[credentials.CertificateSecretName(c.Name, cert.Name)]
		if cert.SignedBy == v1alpha1.CARoleClient && cert.RenewIn == credentials.RenewInPreparing && s != nil && onNewCA(s) {
			return true
		}
	}
	return false
}

// errManagedCheckFailed marks a check of the managed cluster that failed (its
// condition says how); the reconcile goes on and polls with backoff.
var errManagedCheckFailed = errors.New("a check of the managed cluster failed")

// ensureProbe returns the Secret holding the probe certificate of that name,
// issuing one valid for validity (at most as long as ca) only when there is
// none from ca that is still valid (the Secret
// lives in the Cluster's namespace: a pair that does not chain to ca, such as
// one left from an earlier rotation, or whose key does not match, is
// replaced). Its user, carousel:<name>, has no permissions.
func (r *Reconciler) ensureProbe(ctx context.Context, c *v1alpha1.Cluster, objs *objects, ca *pki.KeyPair, probe string,
	validity time.Duration) (*corev1.Secret, error) {
	name := credentials.CertificateSecretName(c.Name, probe)
	if s := objs.secrets[name]; s != nil {
		if kp, err := pki.ParseKeyPair(s.Data[v1alpha1.DataKeyCertificate], s.Data[v1alpha1.DataKeyPrivateKey]); err == nil &&
			pki.SignedBy(kp.Cert, ca.Cert) && r.Clock.Now().Before(kp.Cert.NotAfter) {
			return s, nil
		}
	}
	kp, err := ca.IssueKeyPair(pki.LeafTemplate{
		CommonName: "carousel:" + probe, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		Validity: validity,
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
		labels: map[string]string{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelCertificate: probe,
			v1alpha1.LabelSignedBy: string(v1alpha1.CARoleClient)},
		data: map[string][]byte{v1alpha1.DataKeyCertificate: kp.CertPEM(), v1alpha1.DataKeyPrivateKey: keyPEM},
	}); err != nil {
		return nil, err
	}
	return objs.secrets[name], nil
}

// reachability is an observation for the ControlPlaneReachable condition;
// updateStatus stamps it.
func reachability(status metav1.ConditionStatus, reason, message string) *metav1.Condition {
	return &metav1.Condition{Type: v1alpha1.ConditionControlPlaneReachable, Status: status, Reason: reason, Message: message}
}

// unreachable is the condition of a check that failed with err. Its message
// leaves out what changes from one failure to the next: a connection's local
// address, which a read or write error names with the ephemeral port it
// used, and the current time, which Go's error for a certificate outside its
// validity names. A pass writes the status only when the message changes,
// and a check that keeps failing the same way must not write it on every
// poll.
func unreachable(prefix string, err error) *metav1.Condition {
	message := err.Error()
	if opErr := (*net.OpError)(nil); errors.As(err, &opErr) && opErr.Source != nil {
		message = strings.Replace(message, opErr.Source.String()+"->", "", 1)
	}
	if invalid := (x509.CertificateInvalidError{}); errors.As(err, &invalid) && invalid.Reason == x509.Expired && invalid.Cert != nil {
		message = strings.Replace(message, invalid.Error(), fmt.Sprintf("x509: the certificate served is valid from %s until %s, not now",
			invalid.Cert.NotBefore.UTC().Format(time.RFC3339), invalid.Cert.NotAfter.UTC().Format(time.RFC3339)), 1)
	}
	return reachability(metav1.ConditionFalse, v1alpha1.ReasonEndpointUnreachable, prefix+message)
}

// endpointRemovedCondition says that the CA rotation holds because its
// endpoint was removed from the spec (past the webhook, which refuses that).
func endpointRemovedCondition(c *v1alpha1.Cluster) *metav1.Condition {
	return heldForTheEndpoint("the CA rotation", string(c.CARotationPhase()), "its API-server checks", c.CARotation().CheckedEndpoint)
}

// heldForTheEndpoint says that rotation, in phase, holds because the endpoint
// its checks ran against, was, was removed from the spec.
func heldForTheEndpoint(rotation, phase, checks, was string) *metav1.Condition {
	return reachability(metav1.ConditionFalse, v1alpha1.ReasonEndpointRemoved, fmt.Sprintf(
		"spec.controlPlane.endpoint was removed during %s (phase %s), so %s cannot run: the rotation holds until the endpoint is set again (it was %s)",
		rotation, phase, checks, was))
}

// gatherEvidence runs a check of the managed cluster that
// rotation.EvidenceDue asked for (once every other step of the phase is
// done), records its result in the scope's facts, and returns what it saw of
// the API server: nil when nothing new. Without an endpoint the checks are
// skipped, and the observation says so.
func (r *Reconciler) gatherEvidence(ctx context.Context, s *scope, check rotation.EvidenceCheck) (*metav1.Condition, error) {
	c, trust := s.cluster, s.trust
	record := func(e rotation.Evidence) { s.facts.Record(check, e, nil) }
	endpoint := c.Spec.ControlPlane.Endpoint
	switch {
	case s.endpointRemoved:
		record(rotation.EvidencePending)
		return endpointRemovedCondition(c), nil
	case s.keyEndpointRemoved:
		record(rotation.EvidenceSkipped) // the CA rotation has no endpoint recorded
		return keyEndpointRemovedCondition(c), nil
	case endpoint == "" || r.Evidence == nil:
		record(rotation.EvidenceSkipped)
		return reachability(metav1.ConditionFalse, v1alpha1.ReasonNoEndpoint,
			"spec.controlPlane.endpoint is empty: the API-server checks of a CA rotation are skipped"), nil
	}
	operator := s.objs.secrets[credentials.CertificateSecretName(c.Name, credentials.CertOperator)]
	var err error
	switch check {
	case rotation.CheckNewClientAccepted:
		err = r.Evidence.ClientAccepted(ctx, endpoint, trust[v1alpha1.CARoleCluster], operator.Data[v1alpha1.DataKeyCertificate], operator.Data[v1alpha1.DataKeyPrivateKey])
	case rotation.CheckOldCADropped:
		err = r.Evidence.ServesChainTo(ctx, endpoint, trust[v1alpha1.CARoleCluster])
		probe := s.objs.secrets[oldClientProbeSecret(c)]
		if err == nil && probe != nil {
			err = r.Evidence.ClientRejected(ctx, endpoint, trust[v1alpha1.CARoleCluster], probe.Data[v1alpha1.DataKeyCertificate], probe.Data[v1alpha1.DataKeyPrivateKey])
		}
		if err == nil && probe == nil {
			record(rotation.EvidencePassed)
			return reachability(metav1.ConditionTrue, v1alpha1.ReasonEndpointReachable,
				"the API server serves a certificate from the current cluster CA; the dropped client CA's rejection was not checked: no probe certificate (the endpoint was set after it was dropped, or the CA had expired)"), nil
		}
	case rotation.CheckKubeRootCA, rotation.CheckAPIServices:
		lagging, role := r.Evidence.KubeRootCABehind, v1alpha1.CARoleCluster
		if check == rotation.CheckAPIServices {
			lagging, role = r.Evidence.APIServicesBehind, v1alpha1.CARoleMetricsServer
		}
		var behind []string
		behind, err = lagging(ctx, endpoint, trust[v1alpha1.CARoleCluster], operator.Data[v1alpha1.DataKeyCertificate], operator.Data[v1alpha1.DataKeyPrivateKey], trust[role])
		if err == nil {
			// The API server answered: what it reported stays as the
			// previous check left it; the rotation condition names what
			// lags behind.
			result := rotation.EvidencePassed
			if len(behind) > 0 {
				result = rotation.EvidencePending
			}
			s.facts.Record(check, result, behind)
			return nil, nil
		}
	default:
		record(rotation.EvidencePending)
		return nil, nil
	}
	if err != nil {
		record(rotation.EvidencePending)
		return unreachable("", err), errManagedCheckFailed
	}
	record(rotation.EvidencePassed)
	return reachability(metav1.ConditionTrue, v1alpha1.ReasonEndpointReachable, "the API server behaves as the phase requires"), nil
}
