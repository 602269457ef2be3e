package plugin

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki/pkitest"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// A Secret that cannot be read costs its own row, not the others': every
// row that can be read is printed with its date, the others as
// <unreadable>, and the command then fails naming each with its reason.
func TestCheckExpirationPrintsEveryRowItCanRead(t *testing.T) {
	now := time.Now()
	ca := pkitest.NewCA(t, "client-ca")
	caData, err := credentials.EncodeCASecretData(&credentials.CAs{Current: ca})
	if err != nil {
		t.Fatal(err)
	}
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	secret := func(name string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Labels: map[string]string{v1alpha1.LabelCluster: "prod"}}, Data: data}
	}
	admin := credentials.CertificateSecretName("prod", credentials.CertAdmin)
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(
		secret(credentials.CASecretName("prod", v1alpha1.CARoleClient), caData),
		secret(credentials.CASecretName("prod", v1alpha1.CARoleCluster), map[string][]byte{v1alpha1.DataKeyCertificate: []byte("not PEM")}),
		secret(admin, map[string][]byte{v1alpha1.DataKeyCertificate: []byte("not PEM")}),
	).Build()

	info, err := expirationInfo(context.Background(), c, cl, now)
	if err != nil {
		t.Fatalf("expirationInfo: %v", err)
	}
	var out strings.Builder
	if err := writeExpiration(&out, info); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"admin <unreadable> client " + admin, "client " + ca.Cert.NotAfter.UTC().Format("Jan 02, 2006 15:04 MST"),
		"cluster <unreadable>", "etcd <missing>"} {
		if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), row) {
			t.Errorf("no row %q in\n%s", row, out.String())
		}
	}
	err = unreadableRows(info, cl)
	if err == nil || !strings.Contains(err.Error(), "certificate admin (Secret "+admin+"): ") || !strings.Contains(err.Error(), "cluster CA: secret prod-ca-cluster") {
		t.Errorf("err = %v, want the two unreadable rows named", err)
	}
	if strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("err = %q, want two lines (a CA the status does not record yet is only shown missing)", err)
	}
	// A CA the status records whose Secret is missing was lost: named too.
	cl.Status.Credentials = &v1alpha1.ClusterCredentials{CertificateAuthorities: []v1alpha1.CertificateAuthorityInventory{
		{Role: v1alpha1.CARoleEtcd, Current: &v1alpha1.CertificateInfo{Fingerprint: "ab"}}}}
	err = unreadableRows(info, cl)
	if err == nil || !strings.Contains(err.Error(), "etcd CA: Secret prod-ca-etcd is missing (or lost its carousel.dev/cluster label), though the Cluster's status records the CA") ||
		strings.Contains(err.Error(), "kubelet CA") || strings.Count(err.Error(), "\n") != 2 {
		t.Errorf("err = %v, want the lost etcd CA named with the two unreadable rows, and no other CA", err)
	}
}
