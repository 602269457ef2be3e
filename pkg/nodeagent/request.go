package nodeagent

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// ErrDenied and ErrFailed say how a CSR ended without a certificate.
var (
	ErrDenied = errors.New("denied")
	ErrFailed = errors.New("failed")
)

// CSRName names the CSR of a node's key: a digest of the public key and the
// node name, so a restarted agent finds and waits on the CSR it created.
func CSRName(node string, pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(append(der, 0), node...))
	return "node-csr-" + hex.EncodeToString(sum[:16]), nil
}

// ClientCSR is the request for a node's client certificate.
func ClientCSR(name, node string, key crypto.Signer, duration time.Duration) (*certificatesv1.CertificateSigningRequest, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		return nil, err
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pki.EncodeCertificateRequest(der),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     usages,
		},
	}
	if duration > 0 {
		csr.Spec.ExpirationSeconds = ptr.To(int32(duration.Seconds()))
	}
	return csr, nil
}

// ServingCSR is the request for a kubelet's serving certificate, as the
// kubelet makes it (k8s.io/kubernetes pkg/kubelet/certificate): for
// system:node:<node>, with the node's addresses as SANs, signer
// kubernetes.io/kubelet-serving, and key encipherment only for an RSA key.
func ServingCSR(name, node string, key crypto.Signer, addresses []corev1.NodeAddress) (*certificatesv1.CertificateSigningRequest, error) {
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}}
	seenDNS, seenIP := map[string]bool{}, map[string]bool{}
	for _, a := range addresses {
		ip := net.ParseIP(a.Address)
		switch {
		case a.Type == corev1.NodeHostName && ip == nil, a.Type == corev1.NodeInternalDNS, a.Type == corev1.NodeExternalDNS:
			if !seenDNS[a.Address] {
				seenDNS[a.Address] = true
				tmpl.DNSNames = append(tmpl.DNSNames, a.Address)
			}
		case ip != nil && (a.Type == corev1.NodeHostName || a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP):
			if !seenIP[ip.String()] {
				seenIP[ip.String()] = true
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		}
	}
	if len(tmpl.IPAddresses) == 0 {
		return nil, fmt.Errorf("node %s reports no IP address: a serving certificate needs one", node)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, err
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	if _, rsa := key.Public().(*rsa.PublicKey); rsa {
		usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth}
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pki.EncodeCertificateRequest(der),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     usages,
		},
	}, nil
}

// RequestCertificate creates the CSR (or finds the one a previous run
// created for the same key) and waits until it is issued, denied or failed,
// or ctx ends. An existing CSR of that name for another key is an error, the
// CSR's refusal when it was denied or failed.
//
// client-go's util/certificate/csr does the same create-or-reuse and wait.
// Carousel keeps its own for what its callers branch on: a refusal is
// ErrDenied or ErrFailed with the condition's reason and message (client-go
// returns untyped errors), upon which the agent discards the pending key and
// starts over with a new one and a new CSR name, and the refusal of a CSR
// left by a key already discarded is reported as such rather than as a
// conflict.
func RequestCertificate(ctx context.Context, cs kubernetes.Interface, csr *certificatesv1.CertificateSigningRequest, key crypto.Signer) ([]byte, error) {
	api := cs.CertificatesV1().CertificateSigningRequests()
	created, err := api.Create(ctx, csr, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = api.Get(ctx, csr.Name, metav1.GetOptions{})
		if err == nil {
			if err = sameKey(created, key); err != nil {
				// A refused CSR keeps its name, and its key was discarded:
				// report the refusal rather than the other key.
				if _, done, refused := outcome(created); done && refused != nil {
					return nil, refused
				}
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("CSR %s: %w", csr.Name, err)
	}
	return WaitForCertificate(ctx, cs, created)
}

// sameKey checks that an existing CSR asks for our key.
func sameKey(csr *certificatesv1.CertificateSigningRequest, key crypto.Signer) error {
	req, err := pki.ParseCertificateRequest(csr.Spec.Request)
	if err != nil {
		return fmt.Errorf("the existing CSR: %w", err)
	}
	if eq, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !eq.Equal(req.PublicKey) {
		return errors.New("an existing CSR of that name is for another key")
	}
	return nil
}

// WaitForCertificate watches a CSR until it has a certificate (returned as
// PEM), or is denied or failed.
func WaitForCertificate(ctx context.Context, cs kubernetes.Interface, csr *certificatesv1.CertificateSigningRequest) ([]byte, error) {
	api := cs.CertificatesV1().CertificateSigningRequests()
	name := csr.Name
	for {
		if cert, done, err := outcome(csr); done {
			return cert, err
		}
		w, err := api.Watch(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", csr.Name).String(), ResourceVersion: csr.ResourceVersion,
		})
		if err != nil {
			return nil, fmt.Errorf("watching CSR %s: %w", csr.Name, err)
		}
		for ev := range w.ResultChan() {
			if obj, ok := ev.Object.(*certificatesv1.CertificateSigningRequest); ok && ev.Type != watch.Deleted {
				csr = obj
				if cert, done, err := outcome(csr); done {
					w.Stop()
					return cert, err
				}
			}
		}
		w.Stop()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("waiting for CSR %s to be approved and signed: %w", name, err)
		}
		// The watch ended (timeout, a restarted API server): read again and resume.
		if csr, err = api.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("CSR %s: %w", name, err)
		}
	}
}

func outcome(csr *certificatesv1.CertificateSigningRequest) ([]byte, bool, error) {
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateDenied:
			return nil, true, fmt.Errorf("CSR %s %w: %s: %s", csr.Name, ErrDenied, c.Reason, c.Message)
		case certificatesv1.CertificateFailed:
			return nil, true, fmt.Errorf("CSR %s %w: %s: %s", csr.Name, ErrFailed, c.Reason, c.Message)
		}
	}
	if len(csr.Status.Certificate) > 0 {
		return csr.Status.Certificate, true, nil
	}
	return nil, false, nil
}
