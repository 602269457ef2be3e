package cluster

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// TestClusterGauges: a scrape shows what the last reconcile of each Cluster
// found, a CA or certificate no longer there has no series, and a forgotten
// Cluster none at all.
func TestClusterGauges(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	expiring := func(unix int64) *pki.KeyPair {
		return &pki.KeyPair{Cert: &x509.Certificate{NotAfter: time.Unix(unix, 0)}}
	}
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge"}}
	c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{
		CertificateAuthorities: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared}}}
	other := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "core"}}
	names := []string{"carousel_ca_expiry_timestamp_seconds", "carousel_certificate_expiry_timestamp_seconds",
		"carousel_ca_rotation_phase", "carousel_service_account_key_rotation_phase", "carousel_ca_rotation_recommended"}
	expect := func(step, want string) {
		t.Helper()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	const help = `
# HELP carousel_ca_expiry_timestamp_seconds NotAfter of each CA of a cluster, as a Unix timestamp; generation is current or previous.
# TYPE carousel_ca_expiry_timestamp_seconds gauge
# HELP carousel_ca_rotation_phase 1 for the CA rotation phase a cluster is in, 0 for the others.
# TYPE carousel_ca_rotation_phase gauge
# HELP carousel_ca_rotation_recommended 1 when the manager recommends acting on a cluster's CA rotation for the reason (RotationDue, CompletionDue), 0 otherwise.
# TYPE carousel_ca_rotation_recommended gauge
# HELP carousel_certificate_expiry_timestamp_seconds NotAfter of each leaf certificate of a cluster, as a Unix timestamp.
# TYPE carousel_certificate_expiry_timestamp_seconds gauge
`

	m.observe(c, map[v1alpha1.CARole]*credentials.CAs{v1alpha1.CARoleCluster: {Current: expiring(2000), Previous: expiring(1000)}},
		map[string]time.Time{"kube-apiserver": time.Unix(1500, 0), "admin": time.Unix(1600, 0)})
	m.recommendation(c, &rotation.Recommendation{Reason: v1alpha1.ReasonCompletionDue})
	m.recommendation(other, nil)
	expect("two CAs, two certificates and a recommendation; another Cluster's recommendation", help+`
carousel_ca_expiry_timestamp_seconds{cluster="edge",generation="current",namespace="team-a",role="cluster"} 2000
carousel_ca_expiry_timestamp_seconds{cluster="edge",generation="previous",namespace="team-a",role="cluster"} 1000
carousel_certificate_expiry_timestamp_seconds{certificate="admin",cluster="edge",namespace="team-a"} 1600
carousel_certificate_expiry_timestamp_seconds{certificate="kube-apiserver",cluster="edge",namespace="team-a"} 1500
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="Aborted"} 0
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="Aborting"} 0
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="Completed"} 0
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="Finalizing"} 0
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="Prepared"} 1
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="Preparing"} 0
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="PreparingWithoutWorkersRollout"} 0
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="WaitingForWorkersRollout"} 0
carousel_ca_rotation_recommended{cluster="edge",namespace="team-a",reason="CompletionDue"} 1
carousel_ca_rotation_recommended{cluster="edge",namespace="team-a",reason="RotationDue"} 0
carousel_ca_rotation_recommended{cluster="core",namespace="team-b",reason="CompletionDue"} 0
carousel_ca_rotation_recommended{cluster="core",namespace="team-b",reason="RotationDue"} 0
`)

	c.Status.Credentials.Rotation.CertificateAuthorities.Phase = v1alpha1.RotationCompleted
	c.Status.Credentials.Rotation.ServiceAccountKey = &v1alpha1.ServiceAccountKeyRotation{Phase: v1alpha1.ServiceAccountKeyPrepared}
	m.observe(c, map[v1alpha1.CARole]*credentials.CAs{v1alpha1.CARoleCluster: {Current: expiring(2000)}},
		map[string]time.Time{"kube-apiserver": time.Unix(2500, 0)})
	m.recommendation(c, nil)
	m.forget(other.Namespace, other.Name)
	expect("the old CA dropped, one certificate gone, the key rotated, the recommendation followed, the other Cluster forgotten", help+`
# HELP carousel_service_account_key_rotation_phase 1 for the service-account key rotation phase a cluster is in, 0 for the others; no series for a cluster whose key was never rotated.
# TYPE carousel_service_account_key_rotation_phase gauge
carousel_ca_expiry_timestamp_seconds{cluster="edge",generation="current",namespace="team-a",role="cluster"} 2000
carousel_certificate_expiry_timestamp_seconds{certificate="kube-apiserver",cluster="edge",namespace="team-a"} 2500
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="Aborted"} 0
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="Aborting"} 0
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="Completed"} 1
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="Finalizing"} 0
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="Prepared"} 0
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="Preparing"} 0
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="PreparingWithoutWorkersRollout"} 0
carousel_ca_rotation_phase{cluster="edge",namespace="team-a",phase="WaitingForWorkersRollout"} 0
carousel_service_account_key_rotation_phase{cluster="edge",namespace="team-a",phase="Completed"} 0
carousel_service_account_key_rotation_phase{cluster="edge",namespace="team-a",phase="Finalizing"} 0
carousel_service_account_key_rotation_phase{cluster="edge",namespace="team-a",phase="Prepared"} 1
carousel_service_account_key_rotation_phase{cluster="edge",namespace="team-a",phase="Preparing"} 0
carousel_ca_rotation_recommended{cluster="edge",namespace="team-a",reason="CompletionDue"} 0
carousel_ca_rotation_recommended{cluster="edge",namespace="team-a",reason="RotationDue"} 0
`)
}

// BenchmarkScrapeClusterGauges measures one scrape of the per-Cluster gauges
// of a fleet of 1,000 Clusters in the middle of a rotation (two CAs a role,
// the key rotated, a recommendation: 41 series a Cluster), through the
// handler the manager serves /metrics with.
func BenchmarkScrapeClusterGauges(b *testing.B) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	ca := &pki.KeyPair{Cert: &x509.Certificate{NotAfter: time.Unix(2_000_000_000, 0)}}
	all := map[v1alpha1.CARole]*credentials.CAs{}
	for _, role := range v1alpha1.CARoles() {
		all[role] = &credentials.CAs{Current: ca, Previous: ca}
	}
	certs := map[string]time.Time{}
	for _, cert := range credentials.Certificates(&v1alpha1.Cluster{}) {
		certs[cert.Name] = time.Unix(1_900_000_000, 0)
	}
	for i := range 1000 {
		c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: fmt.Sprintf("c-%04d", i)}}
		c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{
			CertificateAuthorities: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared},
			ServiceAccountKey:      &v1alpha1.ServiceAccountKeyRotation{Phase: v1alpha1.ServiceAccountKeyPrepared}}}
		m.observe(c, all, certs)
		m.recommendation(c, &rotation.Recommendation{Reason: v1alpha1.ReasonCompletionDue})
	}
	handler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	var size int
	for b.Loop() {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		size = w.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes/scrape")
}

// TestAGoneClusterIsForgottenBesideThisController: the controllers beside
// this one (the kubelet CSR metrics) hear of a Cluster that is gone, and of
// no other.
func TestAGoneClusterIsForgottenBesideThisController(t *testing.T) {
	sc := newSettledCluster(t)
	var forgotten []types.NamespacedName
	sc.r.OnForget = func(key types.NamespacedName) { forgotten = append(forgotten, key) }
	sc.reconcile()
	if len(forgotten) != 0 {
		t.Fatalf("a Cluster that is there was forgotten: %v", forgotten)
	}
	if err := sc.api.Delete(context.Background(), sc.cluster()); err != nil {
		t.Fatal(err)
	}
	sc.reconcile()
	if want := []types.NamespacedName{sc.key}; !slices.Equal(forgotten, want) {
		t.Errorf("forgotten %v, want %v", forgotten, want)
	}
}
