package nodeagent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the node agent's metrics. A nil *Metrics records nothing.
type Metrics struct {
	expiry          prometheus.Gauge
	renewErrors     prometheus.Counter
	kubeletRestarts prometheus.Counter
	rebootstraps    prometheus.Counter
	renewalDuration prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		expiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "carousel_node_agent_client_certificate_expiration_seconds",
			Help: "NotAfter of the node's current client certificate, as a Unix timestamp.",
		}),
		renewErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "carousel_node_agent_client_certificate_renew_errors_total",
			Help: "Failed attempts to obtain or renew the node's client certificate, to carry out an in-place renewal, or to re-bootstrap the kubelet.",
		}),
		kubeletRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "carousel_node_agent_kubelet_restarts_total",
			Help: "Restarts of the kubelet by the agent, to make it load credentials it does not reload by itself.",
		}),
		rebootstraps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "carousel_node_agent_kubelet_rebootstraps_total",
			Help: "Re-bootstraps of a kubelet whose credentials the API server refused, completed by the agent: " +
				"the kubeconfig moved aside, the kubelet bootstrapped again with its bootstrap kubeconfig and brought in line with the node trust bundles.",
		}),
		renewalDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "carousel_node_agent_renewal_duration_seconds",
			Help: "Time from the start of the attempt that carried out an in-place renewal to its report on the Node.",
			// 1 s to about 34 minutes: a renewal waits for a CSR and, with a
			// restart, for the kubelet and its serving certificate.
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
	}
	reg.MustRegister(m.expiry, m.renewErrors, m.kubeletRestarts, m.rebootstraps, m.renewalDuration)
	return m
}

func (m *Metrics) setExpiry(t time.Time) {
	if m != nil {
		m.expiry.Set(float64(t.Unix()))
	}
}

func (m *Metrics) renewError() {
	if m != nil {
		m.renewErrors.Inc()
	}
}

func (m *Metrics) kubeletRestarted() {
	if m != nil {
		m.kubeletRestarts.Inc()
	}
}

func (m *Metrics) kubeletRebootstrapped() {
	if m != nil {
		m.rebootstraps.Inc()
	}
}

func (m *Metrics) renewalDone(d time.Duration) {
	if m != nil {
		m.renewalDuration.Observe(d.Seconds())
	}
}
