package cluster

import (
	"context"
	"crypto/x509"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/oldca"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// bundles are the PEM trust bundles by role.
type bundles map[v1alpha1.CARole][]byte

// ensureBundles writes every role's trust bundle: the current CA and, while
// kept, the previous one.
func (r *Reconciler) ensureBundles(ctx context.Context, c *v1alpha1.Cluster, objs *objects, all map[v1alpha1.CARole]*credentials.CAs) (bundles, error) {
	out := make(bundles, len(all))
	for _, role := range v1alpha1.CARoles() {
		pemBytes := all[role].Bundle().PEM()
		name := credentials.BundleConfigMapName(c.Name, role)
		if err := r.writeConfigMap(ctx, c, objs, name, credentials.BundleLabels(c.Name, role),
			map[string]string{v1alpha1.DataKeyCABundle: string(pemBytes)}); err != nil {
			return nil, err
		}
		out[role] = pemBytes
	}
	return out, nil
}

// certificateFacts summarise the leaf certificates after ensureCertificates.
type certificateFacts struct {
	clientsOnNewCA, allOnNewCA bool
	// nextRenewal is when the first certificate is due for renewal.
	nextRenewal time.Time
	// notAfter is the expiry of each certificate, by name.
	notAfter map[string]time.Time
	// clients are the certificates the client CA signs, for the old-CA
	// usage gate.
	clients []oldca.Certificate
}

// ensureCertificates issues or re-issues every leaf certificate that is
// missing, signed by another CA than the phase wants, out of shape, or due
// for renewal, and keeps its Secret's trust bundle and kubeconfig current.
// One event names the certificates it issued and stored, a later write's
// failure notwithstanding: the next pass does not issue them again.
func (r *Reconciler) ensureCertificates(ctx context.Context, c *v1alpha1.Cluster, objs *objects, all map[v1alpha1.CARole]*credentials.CAs,
	trust bundles, trustEstablished bool) (certificateFacts, error) {
	now := r.Clock.Now()
	phase := c.CARotationPhase()
	alg := pki.KeyAlgorithm(c.Spec.Certificates.KeyAlgorithmOrDefault())
	facts := certificateFacts{clientsOnNewCA: true, allOnNewCA: true, notAfter: map[string]time.Time{}}
	var issued []string
	defer func() {
		if len(issued) > 0 {
			r.event(c, corev1.EventTypeNormal, v1alpha1.EventCertificateIssued, "Issued %s", strings.Join(issued, ", "))
		}
	}()
	for _, cert := range credentials.Certificates(c) {
		cas := all[cert.SignedBy]
		name := credentials.CertificateSecretName(c.Name, cert.Name)
		existing := objs.secrets[name]
		var leaf *x509.Certificate // the certificate the Secret holds, if it holds a matching pair
		if existing != nil {
			leaf, _ = pki.ParsePairedCertificate(existing.Data[v1alpha1.DataKeyCertificate], existing.Data[v1alpha1.DataKeyPrivateKey])
		}
		issuer := cas.Current
		if rotation.Issuer(cert.RenewIn, phase, trustEstablished, leaf != nil && pki.SignedBy(leaf, cas.Current.Cert)) == rotation.Previous && cas.Previous != nil {
			issuer = cas.Previous
		}
		data, isNew := map[string][]byte{}, false
		if leaf != nil && pki.SignedBy(leaf, issuer.Cert) && matches(leaf, cert, alg) && !renewalDue(leaf, issuer.Cert, now) {
			data[v1alpha1.DataKeyCertificate], data[v1alpha1.DataKeyPrivateKey] = existing.Data[v1alpha1.DataKeyCertificate], existing.Data[v1alpha1.DataKeyPrivateKey]
		} else {
			kp, err := issuer.IssueKeyPair(template(cert, c), alg, now)
			if err != nil {
				return facts, err
			}
			keyPEM, err := kp.KeyPEM()
			if err != nil {
				return facts, err
			}
			leaf, data[v1alpha1.DataKeyCertificate], data[v1alpha1.DataKeyPrivateKey], isNew = kp.Cert, kp.CertPEM(), keyPEM, true
		}
		data[v1alpha1.DataKeyCABundle] = trust[cert.PeerTrust]
		if cert.Kubeconfig {
			kubeconfig, err := credentials.Kubeconfig(c.Name, credentials.APIServerURL(c), trust[v1alpha1.CARoleCluster],
				data[v1alpha1.DataKeyCertificate], data[v1alpha1.DataKeyPrivateKey], cert.CommonName)
			if err != nil {
				return facts, err
			}
			data[v1alpha1.DataKeyKubeconfig] = kubeconfig
		}
		if err := r.writeSecret(ctx, c, objs, desiredSecret{name: name, labels: credentials.CertificateLabels(c.Name, cert), data: data}); err != nil {
			return facts, err
		}
		if isNew {
			issued = append(issued, cert.Name)
		}
		onNew := pki.SignedBy(leaf, cas.Current.Cert)
		facts.allOnNewCA = facts.allOnNewCA && onNew
		if cert.RenewIn == credentials.RenewInPreparing {
			facts.clientsOnNewCA = facts.clientsOnNewCA && onNew
		}
		facts.notAfter[cert.Name] = leaf.NotAfter
		if cert.SignedBy == v1alpha1.CARoleClient {
			facts.clients = append(facts.clients, oldca.Certificate{Secret: name, User: leaf.Subject.CommonName,
				Fingerprint: pki.Fingerprint(leaf), FromNewCA: onNew})
		}
		if at, ok := renewalTime(leaf, issuer.Cert); ok && (facts.nextRenewal.IsZero() || at.Before(facts.nextRenewal)) {
			facts.nextRenewal = at
		}
	}
	return facts, nil
}

func template(cert credentials.Certificate, c *v1alpha1.Cluster) pki.LeafTemplate {
	return pki.LeafTemplate{
		CommonName: cert.CommonName, Organization: cert.Organization,
		DNSNames: cert.DNSNames, IPAddresses: cert.IPAddresses,
		Usages: cert.Usages, Validity: c.Spec.Certificates.LeafValidityOrDefault(),
	}
}

// renewalTime is when leaf, signed by ca, is due for renewal: once two
// thirds of its lifetime have passed. ok is false for a leaf that ends with
// ca, which pki.Issue caps a leaf at: a new one would not outlive it.
// Re-issued all the same, it would roll its consumers again at two thirds
// of each shorter lifetime, and from the last minutes of ca on, in every
// pass (a leaf is backdated, pki.Backdate).
func renewalTime(leaf, ca *x509.Certificate) (at time.Time, ok bool) {
	return leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) * 2 / 3), leaf.NotAfter.Before(ca.NotAfter)
}

// renewalDue reports whether leaf, signed by ca, is due for renewal at now
// (renewalTime).
func renewalDue(leaf, ca *x509.Certificate, now time.Time) bool {
	at, ok := renewalTime(leaf, ca)
	return ok && !now.Before(at)
}

// matches reports whether an issued certificate still has the subject, names,
// usages and key algorithm the catalogue asks for.
func matches(got *x509.Certificate, want credentials.Certificate, alg pki.KeyAlgorithm) bool {
	gotAlg, err := pki.AlgorithmOf(got.PublicKey)
	if err != nil || gotAlg != alg || got.Subject.CommonName != want.CommonName {
		return false
	}
	if !slices.Equal(got.Subject.Organization, want.Organization) || !slices.Equal(got.ExtKeyUsage, want.Usages) || !sameDNSNames(got.DNSNames, want.DNSNames) || len(got.IPAddresses) != len(want.IPAddresses) {
		return false
	}
	for i := range got.IPAddresses {
		if !got.IPAddresses[i].Equal(want.IPAddresses[i]) {
			return false
		}
	}
	return true
}

// sameDNSNames reports whether two lists of DNS names name the same hosts in
// the same order, a name's case meaning nothing (as a TLS client matches
// them) and a name listed again in another case counting once: a
// certificate issued before the catalogue left out such a repeat (the
// endpoint's host as an extra SAN too) is not issued again for it.
func sameDNSNames(got, want []string) bool {
	return slices.Equal(foldedOnce(got), foldedOnce(want))
}

// foldedOnce is names in lower case, each once, in the order first listed.
func foldedOnce(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n = strings.ToLower(n); !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}
