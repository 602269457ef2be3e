package credentials

import (
	"crypto/x509"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// Data keys of a CA Secret besides tls.crt and tls.key (the current CA).
const (
	// DataKeyPreviousCertificate holds, during a rotation, the old CA's certificate.
	DataKeyPreviousCertificate = "previous-tls.crt"
	// DataKeyPreviousPrivateKey holds, during a rotation, the old CA's key.
	DataKeyPreviousPrivateKey = "previous-tls.key"
	// DataKeyServiceAccountKey and DataKeyServiceAccountPublicKey hold the
	// service-account token signing key pair.
	DataKeyServiceAccountKey       = "sa.key"
	DataKeyServiceAccountPublicKey = "sa.pub"
)

// CASecretName is the name of the Secret that holds a role's CAs.
func CASecretName(cluster string, role v1alpha1.CARole) string {
	return cluster + "-ca-" + string(role)
}

// BundleConfigMapName is the name of the ConfigMap with a role's trust bundle.
func BundleConfigMapName(cluster string, role v1alpha1.CARole) string {
	return cluster + "-ca-" + string(role) + "-bundle"
}

// CertificateSecretName is the name of the Secret of a leaf certificate.
func CertificateSecretName(cluster, certificate string) string {
	return cluster + "-" + certificate
}

// ServiceAccountKeySecretName is the name of the Secret with the
// service-account signing key.
func ServiceAccountKeySecretName(cluster string) string {
	return cluster + "-service-account-key"
}

// BootstrapKubeconfigSecretName is the name of the Secret with the
// kubeconfig new nodes bootstrap with (key kubeconfig).
func BootstrapKubeconfigSecretName(cluster string) string {
	return cluster + "-bootstrap-kubeconfig"
}

// AuditWebhookSecretName is the name of the Secret with the kubeconfig
// (key kubeconfig) with which the managed API server's audit webhook
// backend sends Carousel its audit events, and its bearer token (key token).
func AuditWebhookSecretName(cluster string) string {
	return cluster + "-audit-webhook"
}

// CertificateUsageConfigMapName is the name of the ConfigMap in which
// Carousel records the client certificates that the managed API server's
// audit events showed in use (package oldca).
func CertificateUsageConfigMapName(cluster string) string {
	return cluster + "-client-certificate-usage"
}

// IssuedKubeconfigsConfigMapName is the name of the ConfigMap in which
// kubectl carousel kubeconfig records the kubeconfigs it issues (package
// oldca).
func IssuedKubeconfigsConfigMapName(cluster string) string {
	return cluster + "-issued-kubeconfigs"
}

// KubeletCertificatesConfigMapName is the name of the ConfigMap in which
// Carousel records the kubelet client certificates it signs (package oldca).
func KubeletCertificatesConfigMapName(cluster string) string {
	return cluster + "-kubelet-client-certificates"
}

// IsRecord says whether a labelled ConfigMap of the Cluster is one of the
// records of package oldca, which the old-CA usage gate reads and nothing
// else of the Cluster depends on.
func IsRecord(cluster, configMap string) bool {
	switch configMap {
	case CertificateUsageConfigMapName(cluster), IssuedKubeconfigsConfigMapName(cluster), KubeletCertificatesConfigMapName(cluster):
		return true
	}
	return false
}

// WriteRecord runs write, a read-modify-write of one of the records
// (IsRecord), again while it loses a race to another writer: its update
// conflicts, or its create finds the ConfigMap another writer just created.
// A run after a lost race must read the ConfigMap from the API server, not
// from what it read or wrote before, nor from a cache.
func WriteRecord(write func() error) error {
	return retry.OnError(retry.DefaultRetry, func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }, write)
}

// CALabels are the labels of a CA Secret.
func CALabels(cluster string, role v1alpha1.CARole) map[string]string {
	return map[string]string{v1alpha1.LabelCluster: cluster, v1alpha1.LabelCA: string(role)}
}

// BundleLabels are the labels of a trust-bundle ConfigMap.
func BundleLabels(cluster string, role v1alpha1.CARole) map[string]string {
	return map[string]string{v1alpha1.LabelCluster: cluster, v1alpha1.LabelCABundle: string(role)}
}

// CertificateLabels are the labels of a leaf certificate Secret.
func CertificateLabels(cluster string, cert Certificate) map[string]string {
	return map[string]string{
		v1alpha1.LabelCluster: cluster, v1alpha1.LabelCertificate: cert.Name, v1alpha1.LabelSignedBy: string(cert.SignedBy),
	}
}

// ClusterLabels are the labels every managed object carries.
func ClusterLabels(cluster string) map[string]string {
	return map[string]string{v1alpha1.LabelCluster: cluster}
}

// CAs are the certificate authorities of one role: the current one and,
// during a rotation, the previous one.
type CAs struct {
	Current  *pki.KeyPair
	Previous *pki.KeyPair
	// Rotation is the v1alpha1.AnnotationRotation value of the Secret.
	Rotation string
	// AbortedRotation is its v1alpha1.AnnotationAbortedRotation value: when
	// it is Rotation, the rotation was aborted and Current is the old CA
	// again.
	AbortedRotation string
}

// Bundle is the role's trust bundle: the current CA and the previous one if kept.
func (c *CAs) Bundle() pki.Bundle {
	if c.Previous == nil {
		return pki.NewBundle(c.Current.Cert)
	}
	return pki.NewBundle(c.Current.Cert, c.Previous.Cert)
}

// Restored reports whether an abort of the rotation that made the current
// CA swapped the role's CAs back: the old CA is current again, the new one
// previous until it is deleted.
func (c *CAs) Restored() bool {
	return c.AbortedRotation != "" && c.AbortedRotation == c.Rotation
}

// WrittenInRotation reports whether the role's Secret was written by the CA
// rotation under way on cl: its rotation annotation is cl.CARotationID().
// With none under way, or one without a lastInitiationTime, it is false.
func (c *CAs) WrittenInRotation(cl *v1alpha1.Cluster) bool {
	id := cl.CARotationID()
	return id != "" && c.Rotation == id
}

// BeforeRotation is, during a rotation that is not finalizing, the CA the
// role had before it: the previous one, unless an abort made it current
// again (Restored) or the role never got a new one (no previous CA).
func (c *CAs) BeforeRotation() *pki.KeyPair {
	if c.Previous == nil || c.Restored() {
		return c.Current
	}
	return c.Previous
}

// Issuer returns the one of the role's CAs that signed cert, nil when
// neither did.
func (c *CAs) Issuer(cert *x509.Certificate) *pki.KeyPair {
	for _, ca := range []*pki.KeyPair{c.Current, c.Previous} {
		if ca != nil && pki.SignedBy(cert, ca.Cert) {
			return ca
		}
	}
	return nil
}

// DecodeCASecret reads a role's CAs from its Secret. Each must be able to
// sign certificates (pki.CheckCA).
func DecodeCASecret(s *corev1.Secret) (*CAs, error) {
	current, err := pki.ParseKeyPair(s.Data[v1alpha1.DataKeyCertificate], s.Data[v1alpha1.DataKeyPrivateKey])
	if err == nil {
		err = pki.CheckCA(current.Cert)
	}
	if err != nil {
		return nil, fmt.Errorf("secret %s: current CA: %w", s.Name, err)
	}
	cas := &CAs{Current: current, Rotation: s.Annotations[v1alpha1.AnnotationRotation], AbortedRotation: s.Annotations[v1alpha1.AnnotationAbortedRotation]}
	prevCert, prevKey := s.Data[DataKeyPreviousCertificate], s.Data[DataKeyPreviousPrivateKey]
	switch {
	case len(prevCert) == 0 && len(prevKey) == 0:
	case len(prevCert) == 0 || len(prevKey) == 0:
		return nil, fmt.Errorf("secret %s: previous CA has only one of %s and %s", s.Name, DataKeyPreviousCertificate, DataKeyPreviousPrivateKey)
	default:
		if cas.Previous, err = pki.ParseKeyPair(prevCert, prevKey); err == nil {
			err = pki.CheckCA(cas.Previous.Cert)
		}
		if err != nil {
			return nil, fmt.Errorf("secret %s: previous CA: %w", s.Name, err)
		}
	}
	return cas, nil
}

// EncodeCASecretData renders a role's CAs as Secret data.
func EncodeCASecretData(cas *CAs) (map[string][]byte, error) {
	data := map[string][]byte{}
	if err := putKeyPair(data, v1alpha1.DataKeyCertificate, v1alpha1.DataKeyPrivateKey, cas.Current); err != nil {
		return nil, err
	}
	if cas.Previous != nil {
		if err := putKeyPair(data, DataKeyPreviousCertificate, DataKeyPreviousPrivateKey, cas.Previous); err != nil {
			return nil, err
		}
	}
	return data, nil
}

func putKeyPair(data map[string][]byte, certKey, keyKey string, kp *pki.KeyPair) error {
	if kp == nil || kp.Cert == nil || kp.Key == nil {
		return errors.New("incomplete key pair")
	}
	keyPEM, err := kp.KeyPEM()
	if err != nil {
		return err
	}
	data[certKey], data[keyKey] = kp.CertPEM(), keyPEM
	return nil
}

// CertificateInfo summarises a certificate for the status, without key material.
func CertificateInfo(kp *pki.KeyPair) *v1alpha1.CertificateInfo {
	if kp == nil {
		return nil
	}
	return &v1alpha1.CertificateInfo{
		Fingerprint: pki.Fingerprint(kp.Cert),
		NotBefore:   metav1.NewTime(kp.Cert.NotBefore),
		NotAfter:    metav1.NewTime(kp.Cert.NotAfter),
	}
}
