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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	certificatesv1client "k8s.io/client-go/kubernetes/typed/certificates/v1"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	carouselcsr "github.com/carousel-dev/carousel/pkg/csr"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// ErrDenied and ErrFailed say how a CSR ended without a certificate.
var (
	ErrDenied = errors.New("denied")
	ErrFailed = errors.New("failed")
)

// issuedRefusal is the agent's refusal of the certificate a CSR was answered
// with (checkIssued, checkIssuedServing): as final as a denial, since the
// signer would answer the same CSR the same way.
type issuedRefusal struct{ error }

func (r issuedRefusal) Unwrap() error { return r.error }

// refusedRequest reports whether err ended a request for good: its CSR was denied
// or failed, or the certificate it was answered with refused. The next
// attempt asks again with another key.
func refusedRequest(err error) bool {
	return errors.Is(err, ErrDenied) || errors.Is(err, ErrFailed) || errors.As(err, new(issuedRefusal))
}

// discardRefused discards store's pending key after err, the refusal of the
// certificate issued for it: a CSR named after that key would find the same
// certificate again, so the next attempt asks with another key.
func discardRefused(store *Store, err error) error {
	if derr := store.DiscardPendingKey(); derr != nil {
		return errors.Join(err, derr)
	}
	return err
}

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
	created, err := createOrFind(ctx, cs, csr, key)
	if err != nil {
		return nil, err
	}
	return WaitForCertificate(ctx, cs, created)
}

// createOrFind creates csr, or finds the CSR of that name that an earlier
// attempt created for key. A CSR of that name for another key is an error:
// its refusal when it was refused.
func createOrFind(ctx context.Context, cs kubernetes.Interface, csr *certificatesv1.CertificateSigningRequest,
	key crypto.Signer) (*certificatesv1.CertificateSigningRequest, error) {
	api := cs.CertificatesV1().CertificateSigningRequests()
	created, err := api.Create(ctx, csr, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = api.Get(ctx, csr.Name, metav1.GetOptions{})
		if err == nil {
			if err = sameKey(created, key); err != nil {
				// A refused CSR keeps its name, and its key was discarded:
				// report the refusal rather than the other key.
				if _, done, refused := outcome(created); done && refused != nil {
					return nil, otherKeysRefusal{refused}
				}
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("CSR %s: %w", csr.Name, err)
	}
	return created, nil
}

// otherKeysRefusal is the refusal (ErrDenied, ErrFailed) of an existing CSR
// of the name asked for, made for another key: it answers nothing about
// ours, which is kept (Manager.requestCertificate).
type otherKeysRefusal struct{ error }

func (r otherKeysRefusal) Unwrap() error { return r.error }

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

// WaitForCertificate waits until the CSR has a certificate (returned as PEM),
// or is denied or failed (ErrDenied, ErrFailed), as client-go's
// csr.WaitForCertificate does, whose errors do not say which: through an
// informer on the one CSR, which lists again when its watch cannot resume (a
// restarted API server, a resource version out of its watch cache) and backs
// off between attempts. Watching again at once from the CSR's own resource
// version would loop without pause while the API server answers that it is
// too old. A CSR deleted, or replaced by another of its name, before it is
// signed is an error: the caller asks again.
func WaitForCertificate(ctx context.Context, cs kubernetes.Interface, csr *certificatesv1.CertificateSigningRequest) ([]byte, error) {
	if cert, done, err := outcome(csr); done {
		return cert, err
	}
	api := cs.CertificatesV1().CertificateSigningRequests()
	name := csr.Name
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return api.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return api.Watch(ctx, opts)
		},
	}, cs)
	gone := fmt.Errorf("CSR %s was deleted before it was signed", name)
	var cert []byte
	var refused error
	_, err := watchtools.UntilWithSync(ctx, lw, &certificatesv1.CertificateSigningRequest{},
		stillThere(ctx, api, name, gone),
		func(ev watch.Event) (bool, error) {
			obj, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
			switch {
			case !ok || obj.Name != name:
				return false, nil
			case ev.Type == watch.Deleted:
				return false, gone
			case obj.UID != csr.UID:
				return false, fmt.Errorf("CSR %s was replaced by another of that name before it was signed", name)
			}
			var done bool
			cert, done, refused = outcome(obj)
			return done, nil
		})
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("waiting for CSR %s to be approved and signed: %w", name, context.Cause(ctx))
	case err != nil:
		return nil, err
	}
	return cert, refused
}

// stillThere is WaitForCertificate's precondition: the CSR name is in the
// informer's first sync, or else still on the API server (a list served
// from the watch cache may not hold a CSR just created; only a read of the
// latest says it is gone).
func stillThere(ctx context.Context, api certificatesv1client.CertificateSigningRequestInterface, name string, gone error) watchtools.PreconditionFunc {
	return func(store cache.Store) (bool, error) {
		if _, exists, err := store.GetByKey(name); err == nil && exists {
			return false, nil
		}
		if _, err := api.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return false, gone
		}
		return false, nil
	}
}

func outcome(req *certificatesv1.CertificateSigningRequest) ([]byte, bool, error) {
	for _, c := range req.Status.Conditions {
		switch {
		case c.Type == certificatesv1.CertificateDenied:
			return nil, true, fmt.Errorf("CSR %s %w: %s: %s", req.Name, ErrDenied, c.Reason, c.Message)
		case carouselcsr.Failed(c): // one False or Unknown is no failure: the signer signs such a request
			return nil, true, fmt.Errorf("CSR %s %w: %s: %s", req.Name, ErrFailed, c.Reason, c.Message)
		}
	}
	if len(req.Status.Certificate) > 0 {
		return req.Status.Certificate, true, nil
	}
	return nil, false, nil
}
