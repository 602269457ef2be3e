package credentials

import (
	"bytes"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// FuzzKubeconfig: Kubeconfig writes the bytes clientcmd.Write does, whether
// it renders them itself or not.
func FuzzKubeconfig(f *testing.F) {
	pem := []byte("-----BEGIN CERTIFICATE-----\nMIIBkTCB+wIJAK\n-----END CERTIFICATE-----\n")
	f.Add("c-0001", "https://kube-apiserver.fleet.svc", "system:kube-controller-manager", pem, pem, []byte("key"))
	f.Add("prod", "https://192.0.2.10:6443/", "carousel:admin", pem, []byte("c"), []byte("k"))
	for _, name := range []string{"true", "Yes", "null", "y", "1", "1e3", "0x1F", ".inf", "a: b", "a:", "-a", "a#b", "~", "é", "a b", ""} {
		f.Add(name, "https://api:6443", name, pem, pem, pem)
	}
	f.Add("prod", "https://[::1]:6443", "u", []byte{}, pem, pem)
	f.Add("prod", "https://api:6443", "u", []byte{0xd7, 0x6d, 0xf8}, pem, pem) // base64 "1234", which YAML quotes
	// Rendered directly: the seeds above all go through clientcmd.Write.
	direct := [][3]string{
		{"prod-eu-1", "https://192.0.2.10:6443", "carousel:admin"},
		{"c-0001", "https://kube-apiserver.fleet.svc", "system:kube-controller-manager"},
		{"prod", "https://api.prod.example.com/", "system:node:w-1"},
	}
	for _, d := range direct {
		if !plainScalar(d[0]) || !plainScalar(d[1]) || !plainScalar(d[2]) || !isPEM(pem) {
			f.Fatalf("the seed %q is not rendered directly", d)
		}
		f.Add(d[0], d[1], d[2], pem, pem, pem)
	}
	f.Fuzz(func(t *testing.T, clusterName, server, user string, caBundle, certPEM, keyPEM []byte) {
		got, err := Kubeconfig(clusterName, server, caBundle, certPEM, keyPEM, user)
		want, wantErr := writeKubeconfig(clusterName, server, caBundle, certPEM, keyPEM, user)
		if (err == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("Kubeconfig(%q, %q, user %q) =\n%s(error %v)\nclientcmd.Write makes\n%s(error %v)", clusterName, server, user, got, err, want, wantErr)
		}
	})
}

// TestOperatorKubeconfigsAreRenderedDirectly: the kubeconfigs of the
// catalogue, for a Cluster with or without an endpoint, take the direct way.
func TestOperatorKubeconfigsAreRenderedDirectly(t *testing.T) {
	for _, endpoint := range []string{"", "https://192.0.2.10:6443", "https://api.prod.example.com"} {
		c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod-eu-1"}}
		c.Spec.ControlPlane.Endpoint = endpoint
		for _, cert := range Certificates(c) {
			if cert.Kubeconfig && (!plainScalar(c.Name) || !plainScalar(APIServerURL(c)) || !plainScalar(cert.CommonName)) {
				t.Errorf("the %s kubeconfig for server %q goes through clientcmd.Write", cert.Name, APIServerURL(c))
			}
		}
	}
}
