package credentials

import (
	"bytes"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/pki/pkitest"
)

func cluster() *v1alpha1.Cluster {
	return &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "team-a"},
		Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3", ControlPlane: v1alpha1.ControlPlaneSpec{
			Endpoint: "https://api.prod.example:6443", ExtraSANs: []string{"192.0.2.7", "api.prod.example", "alt.example"},
		}},
	}
}

func TestCatalogue(t *testing.T) {
	certs := Certificates(cluster())
	names := map[string]bool{}
	for _, c := range certs {
		if names[c.Name] {
			t.Fatalf("certificate %q listed twice", c.Name)
		}
		names[c.Name] = true
		if !slices.Contains(v1alpha1.CARoles(), c.SignedBy) || !slices.Contains(v1alpha1.CARoles(), c.PeerTrust) {
			t.Errorf("%s: unknown role", c.Name)
		}
		serves := slices.Contains(c.Usages, x509.ExtKeyUsageServerAuth)
		if serves && c.RenewIn != RenewInFinalizing {
			t.Errorf("%s serves TLS, so it may move to the new CA only in Finalizing", c.Name)
		}
		if c.Kubeconfig && serves {
			t.Errorf("%s: a kubeconfig credential must be a client certificate", c.Name)
		}
	}
	kubeletClient := certs[slices.IndexFunc(certs, func(c Certificate) bool { return c.Name == CertKubeAPIServerKubelet })]
	if kubeletClient.RenewIn != RenewInFinalizing {
		t.Error("the API server's kubelet client certificate must stay on the old kubelet CA until nodes trust both")
	}
	for _, role := range v1alpha1.CARoles() {
		if !slices.ContainsFunc(certs, func(c Certificate) bool { return c.SignedBy == role }) {
			t.Errorf("no certificate is signed by the %s CA", role)
		}
	}
}

func TestAPIServerSANs(t *testing.T) {
	api := Certificates(cluster())[0]
	if api.Name != CertKubeAPIServer {
		t.Fatalf("first certificate is %s", api.Name)
	}
	for _, want := range []string{"api.prod.example", "alt.example", "kubernetes.default.svc", "kube-apiserver.team-a.svc"} {
		if !slices.Contains(api.DNSNames, want) {
			t.Errorf("DNS SANs %v lack %s", api.DNSNames, want)
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(api.DNSNames)))) != len(api.DNSNames) {
		t.Error("a DNS SAN is listed twice (the endpoint host is an extra SAN too)")
	}
	for _, want := range []string{"192.0.2.7", DefaultServiceIP, "127.0.0.1"} {
		if !slices.ContainsFunc(api.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP(want)) }) {
			t.Errorf("IP SANs %v lack %s", api.IPAddresses, want)
		}
	}
}

// The endpoint's host is listed once, as its URL writes it, when an extra
// SAN (a DNS-1123 subdomain, lower case) names it too in another case.
func TestAnEndpointHostInUpperCaseIsListedOnce(t *testing.T) {
	c := cluster()
	c.Spec.ControlPlane.Endpoint = "https://API.Prod.Example:6443"
	for _, name := range []string{CertKubeAPIServer, CertVPNServer} {
		certs := Certificates(c)
		cert := certs[slices.IndexFunc(certs, func(c Certificate) bool { return c.Name == name })]
		var host []string
		for _, dns := range cert.DNSNames {
			if strings.EqualFold(dns, "api.prod.example") {
				host = append(host, dns)
			}
		}
		if !slices.Equal(host, []string{"API.Prod.Example"}) {
			t.Errorf("%s: DNS SANs %v list the endpoint's host as %q, want it once, as its URL writes it", name, cert.DNSNames, host)
		}
	}
}

func TestVPNServerSANs(t *testing.T) {
	certs := Certificates(cluster())
	vpn := certs[slices.IndexFunc(certs, func(c Certificate) bool { return c.Name == CertVPNServer })]
	for _, want := range []string{"vpn-server.team-a.svc", "api.prod.example", "alt.example"} {
		if !slices.Contains(vpn.DNSNames, want) {
			t.Errorf("DNS SANs %v lack %s: the VPN clients dial the control plane's address", vpn.DNSNames, want)
		}
	}
	if len(vpn.IPAddresses) != 1 || !vpn.IPAddresses[0].Equal(net.ParseIP("192.0.2.7")) {
		t.Errorf("IP SANs %v, want only the extra SAN 192.0.2.7", vpn.IPAddresses)
	}
}

func TestCASecretRoundTrip(t *testing.T) {
	now := time.Now()
	newCA := func() *pki.KeyPair {
		key, _ := pki.GenerateKey(pki.ECDSAP256)
		ca, err := pki.NewCA(pki.CATemplate{CommonName: "ca", Validity: time.Hour}, key, now)
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	in := &CAs{Current: newCA(), Previous: newCA(), Rotation: "2026-11-21T10:00:00Z"}
	data, err := EncodeCASecretData(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeCASecret(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "prod-ca-client", Annotations: map[string]string{v1alpha1.AnnotationRotation: in.Rotation}}, Data: data,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Current.Cert.Equal(in.Current.Cert) || !out.Previous.Cert.Equal(in.Previous.Cert) || out.Rotation != in.Rotation {
		t.Fatal("round trip changed the CAs")
	}
	if len(out.Bundle()) != 2 {
		t.Fatalf("bundle has %d CAs, want 2", len(out.Bundle()))
	}
	delete(data, DataKeyPreviousPrivateKey)
	if _, err := DecodeCASecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Data: data}); err == nil {
		t.Fatal("a previous certificate without its key must not decode")
	}

	// A certificate that may not sign certificates, current or previous.
	mayNotSign := pkitest.NewCAThatMayNotSign(t, "digital-signature-only", now)
	for _, cas := range []*CAs{{Current: mayNotSign}, {Current: newCA(), Previous: mayNotSign}} {
		data, err := EncodeCASecretData(cas)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeCASecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Data: data}); err == nil || !strings.Contains(err.Error(), "lacks certSign") {
			t.Errorf("a CA that may not sign certificates decoded (error %v)", err)
		}
	}
}

func TestKubeconfigIsDeterministic(t *testing.T) {
	a, err := Kubeconfig("prod", "https://api:6443", []byte("ca"), []byte("cert"), []byte("key"), "carousel:admin")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Kubeconfig("prod", "https://api:6443", []byte("ca"), []byte("cert"), []byte("key"), "carousel:admin")
	if !bytes.Equal(a, b) {
		t.Fatal("the same credential rendered twice differs")
	}
	cfg, err := clientcmd.Load(a)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Clusters["prod"].Server != "https://api:6443" || string(cfg.AuthInfos["carousel:admin"].ClientKeyData) != "key" {
		t.Fatalf("unexpected kubeconfig %+v", cfg)
	}
}

// TestReferenceDocumentsEveryCertificate keeps docs/reference/certificates.md
// true to the catalogue: every certificate has a row with its subject,
// signing CA and renewal phase.
func TestReferenceDocumentsEveryCertificate(t *testing.T) {
	doc, err := os.ReadFile("../../docs/reference/certificates.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 2 {
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = line
		}
	}
	for _, cert := range Certificates(cluster()) {
		row, ok := rows[cert.Name]
		if !ok {
			t.Errorf("certificate %s has no row in docs/reference/certificates.md", cert.Name)
			continue
		}
		for _, want := range []string{"CN=" + cert.CommonName, "`" + string(cert.SignedBy) + "`", "`<cluster>-" + cert.Name + "`", string(cert.RenewIn) + " |"} {
			if !strings.Contains(row, want) {
				t.Errorf("the row of %s lacks %q", cert.Name, want)
			}
		}
	}
}

func TestWriteRecordRetriesOnlyALostRace(t *testing.T) {
	configMaps := schema.GroupResource{Resource: "configmaps"}
	for name, tc := range map[string]struct {
		failures []error // what the first runs return
		runs     int
		wantErr  bool
	}{
		"written at once":                    {runs: 1},
		"a conflict, then read again":        {failures: []error{apierrors.NewConflict(configMaps, "r", errors.New("changed"))}, runs: 2},
		"created meanwhile, then read again": {failures: []error{apierrors.NewAlreadyExists(configMaps, "r")}, runs: 2},
		"forbidden":                          {failures: []error{apierrors.NewForbidden(configMaps, "r", errors.New("no"))}, runs: 1, wantErr: true},
		"a broken record":                    {failures: []error{errors.New("does not parse")}, runs: 1, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			runs := 0
			err := WriteRecord(func() error {
				runs++
				if runs <= len(tc.failures) {
					return tc.failures[runs-1]
				}
				return nil
			})
			if runs != tc.runs || (err != nil) != tc.wantErr {
				t.Fatalf("WriteRecord ran the write %d times and returned %v, want %d runs and an error: %t", runs, err, tc.runs, tc.wantErr)
			}
		})
	}
}

// TestBeforeRotation: the CA a role had before the rotation, whichever way
// an abort left its Secret.
func TestBeforeRotation(t *testing.T) {
	now := time.Now()
	newCA := func(name string) *pki.KeyPair {
		key, _ := pki.GenerateKey(pki.ECDSAP256)
		ca, err := pki.NewCA(pki.CATemplate{CommonName: name, Validity: time.Hour}, key, now)
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	ca0, ca1 := newCA("CA0"), newCA("CA1")
	const rotation, earlier = "2026-11-27T09:00:00Z", "2026-11-20T09:00:00Z"
	for name, tc := range map[string]struct {
		cas  *CAs
		want *pki.KeyPair
	}{
		"no rotation": {&CAs{Current: ca0}, ca0},
		"the abort came before the role's new CA": {&CAs{Current: ca0, Rotation: earlier}, ca0},
		"preparing, or aborting before the swap":  {&CAs{Current: ca1, Previous: ca0, Rotation: rotation}, ca0},
		"aborting, swapped back":                  {&CAs{Current: ca0, Previous: ca1, Rotation: rotation, AbortedRotation: rotation}, ca0},
		"aborting, the new CA deleted":            {&CAs{Current: ca0, Rotation: rotation, AbortedRotation: rotation}, ca0},
		"an earlier rotation was aborted":         {&CAs{Current: ca1, Previous: ca0, Rotation: rotation, AbortedRotation: earlier}, ca0},
	} {
		if got := tc.cas.BeforeRotation(); got != tc.want {
			t.Errorf("%s: BeforeRotation = %s, want %s", name, got.Cert.Subject.CommonName, tc.want.Cert.Subject.CommonName)
		}
	}
}

// TestWrittenInRotation: a role's Secret counts as written by the rotation
// under way only when its annotation names that rotation, and never when no
// rotation is under way (a Secret without the annotation included).
func TestWrittenInRotation(t *testing.T) {
	const rotation, earlier = "2026-11-27T09:00:00Z", "2026-11-20T09:00:00Z"
	started, _ := time.Parse(time.RFC3339, rotation)
	rotating := func(phase v1alpha1.CARotationPhase, initiated *metav1.Time) *v1alpha1.Cluster {
		return &v1alpha1.Cluster{Status: v1alpha1.ClusterStatus{Credentials: &v1alpha1.ClusterCredentials{
			Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{Phase: phase, LastInitiationTime: initiated}}}}}
	}
	for name, tc := range map[string]struct {
		cluster  *v1alpha1.Cluster
		rotation string
		want     bool
	}{
		"preparing, written by it":                  {rotating(v1alpha1.RotationPreparing, &metav1.Time{Time: started}), rotation, true},
		"preparing, written by an earlier rotation": {rotating(v1alpha1.RotationPreparing, &metav1.Time{Time: started}), earlier, false},
		"aborting, written by it":                   {rotating(v1alpha1.RotationAborting, &metav1.Time{Time: started}), rotation, true},
		"completed: no rotation under way":          {rotating(v1alpha1.RotationCompleted, &metav1.Time{Time: started}), rotation, false},
		"never rotated, no annotation":              {&v1alpha1.Cluster{}, "", false},
		"a status without lastInitiationTime":       {rotating(v1alpha1.RotationPreparing, nil), "", false},
	} {
		if got := (&CAs{Rotation: tc.rotation}).WrittenInRotation(tc.cluster); got != tc.want {
			t.Errorf("%s: WrittenInRotation = %t, want %t", name, got, tc.want)
		}
	}
}
