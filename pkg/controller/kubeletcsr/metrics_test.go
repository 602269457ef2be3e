package kubeletcsr

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/csr"
)

// TestForgetDropsTheSeriesOfOneCluster: a Cluster that is gone leaves no
// series behind, and the other Clusters' stay.
func TestForgetDropsTheSeriesOfOneCluster(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	signer := certificatesv1.KubeAPIServerClientKubeletSignerName
	for _, name := range []string{"gone", "kept"} {
		c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}}
		obj := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{SignerName: signer}}
		m.decided(c, signer, csr.Decision{Verdict: csr.Approve, Reason: "AutoApproved"})
		m.signed(c, obj, testNow, testNow.Add(time.Second))
		m.failed(c, signer)
		m.signingError(c, signer)
	}
	m.Forget(types.NamespacedName{Namespace: "team-a", Name: "gone"})

	const help = `
# HELP carousel_csr_decisions_total Kubelet CSRs Carousel approved or denied, by verdict and reason.
# TYPE carousel_csr_decisions_total counter
carousel_csr_decisions_total{cluster="kept",namespace="team-a",reason="AutoApproved",signer="kubernetes.io/kube-apiserver-client-kubelet",verdict="Approve"} 1
# HELP carousel_csr_signed_total Kubelet CSRs Carousel signed.
# TYPE carousel_csr_signed_total counter
carousel_csr_signed_total{cluster="kept",namespace="team-a",signer="kubernetes.io/kube-apiserver-client-kubelet"} 1
# HELP carousel_csr_signing_failures_total Approved kubelet CSRs Carousel marked Failed because their signer does not issue what they ask for.
# TYPE carousel_csr_signing_failures_total counter
carousel_csr_signing_failures_total{cluster="kept",namespace="team-a",signer="kubernetes.io/kube-apiserver-client-kubelet"} 1
# HELP carousel_csr_signing_errors_total Attempts to sign an approved kubelet CSR that failed for a reason other than the request (the CA could not be read or used) and are retried.
# TYPE carousel_csr_signing_errors_total counter
carousel_csr_signing_errors_total{cluster="kept",namespace="team-a",signer="kubernetes.io/kube-apiserver-client-kubelet"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(help), "carousel_csr_decisions_total", "carousel_csr_signed_total",
		"carousel_csr_signing_failures_total", "carousel_csr_signing_errors_total"); err != nil {
		t.Error(err)
	}
	var none *Metrics
	none.Forget(types.NamespacedName{Namespace: "team-a", Name: "kept"}) // the controllers run without metrics too
}
