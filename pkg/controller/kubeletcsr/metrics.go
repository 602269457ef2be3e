package kubeletcsr

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/csr"
	"github.com/carousel-dev/carousel/pkg/promutil"
)

// Metrics are the Prometheus metrics of the kubelet CSR controllers. A nil
// *Metrics records nothing.
type Metrics struct {
	decisions *prometheus.CounterVec
	signings  *prometheus.CounterVec
	failures  *prometheus.CounterVec
	errors    *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	backlog   *backlog
	batches   prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		decisions: promutil.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "carousel_csr_decisions_total",
			Help: "Kubelet CSRs Carousel approved or denied, by verdict and reason.",
		}, []string{"namespace", "cluster", "signer", "verdict", "reason"})),
		signings: promutil.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "carousel_csr_signed_total",
			Help: "Kubelet CSRs Carousel signed.",
		}, []string{"namespace", "cluster", "signer"})),
		failures: promutil.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "carousel_csr_signing_failures_total",
			Help: "Approved kubelet CSRs Carousel marked Failed because their signer does not issue what they ask for.",
		}, []string{"namespace", "cluster", "signer"})),
		errors: promutil.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "carousel_csr_signing_errors_total",
			Help: "Attempts to sign an approved kubelet CSR that failed for a reason other than the request (the CA could not be read or used) and are retried.",
		}, []string{"namespace", "cluster", "signer"})),
		latency: promutil.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "carousel_csr_approval_to_signing_seconds",
			Help:    "Time from a kubelet CSR's approval to its certificate.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"signer"})),
		backlog: promutil.Register(reg, newBacklog()),
		batches: promutil.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "carousel_kubelet_certificate_record_batch_size",
			Help: "Kubelet certificates per write of a Cluster's record of signed certificates: _count is the writes, _sum the certificates.",
			// The writes of one Cluster are one at a time, so a batch is at
			// most the CSR workers (64 by default).
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		})),
	}
}

// Forget drops the series of a Cluster that is gone, or no longer this
// shard's: a fleet whose Clusters come and go would otherwise keep the series
// of every Cluster it ever had.
func (m *Metrics) Forget(key types.NamespacedName) {
	if m == nil {
		return
	}
	cluster := prometheus.Labels{"namespace": key.Namespace, "cluster": key.Name}
	for _, vec := range []*prometheus.CounterVec{m.decisions, m.signings, m.failures, m.errors} {
		vec.DeletePartialMatch(cluster)
	}
}

// recorded counts a write of a record with n certificates.
func (m *Metrics) recorded(n int) {
	if m != nil {
		m.batches.Observe(float64(n))
	}
}

// trackBacklog reports the CSR backlog of the managed cluster of key from
// src until the returned function is called.
func (m *Metrics) trackBacklog(key client.ObjectKey, src *backlogSource) (untrack func()) {
	if m == nil {
		return func() {}
	}
	return m.backlog.track(key, src)
}

func (m *Metrics) decided(c *v1alpha1.Cluster, signer string, d csr.Decision) {
	if m == nil || d.Verdict == csr.Ignore {
		return
	}
	m.decisions.WithLabelValues(c.Namespace, c.Name, signer, string(d.Verdict), d.Reason).Inc()
}

func (m *Metrics) failed(c *v1alpha1.Cluster, signer string) {
	if m != nil {
		m.failures.WithLabelValues(c.Namespace, c.Name, signer).Inc()
	}
}

func (m *Metrics) signingError(c *v1alpha1.Cluster, signer string) {
	if m != nil {
		m.errors.WithLabelValues(c.Namespace, c.Name, signer).Inc()
	}
}

// signed counts a signed CSR and, when Carousel saw its approval, the time
// from approval to certificate.
func (m *Metrics) signed(c *v1alpha1.Cluster, obj *certificatesv1.CertificateSigningRequest, approvedAt time.Time, now time.Time) {
	if m == nil {
		return
	}
	m.signings.WithLabelValues(c.Namespace, c.Name, obj.Spec.SignerName).Inc()
	if !approvedAt.IsZero() {
		m.latency.WithLabelValues(obj.Spec.SignerName).Observe(now.Sub(approvedAt).Seconds())
	}
}
