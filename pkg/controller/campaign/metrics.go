package campaign

import (
	"github.com/prometheus/client_golang/prometheus"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/promutil"
)

// Metrics are the Prometheus metrics of the campaign controller. A nil
// *Metrics records nothing.
type Metrics struct {
	clusters *prometheus.GaugeVec
	halted   *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		clusters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "carousel_rotation_campaign_clusters",
			Help: "Clusters a RotationCampaign selects, by their state in its current step (Pending, Waiting, InProgress, Done, Skipped, Failed).",
		}, []string{"namespace", "campaign", "state"}),
		halted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "carousel_rotation_campaign_halted",
			Help: "1 while a RotationCampaign is halted by its failure budget, 0 otherwise.",
		}, []string{"namespace", "campaign"}),
	}
	m.clusters = promutil.Register(reg, m.clusters)
	m.halted = promutil.Register(reg, m.halted)
	return m
}

// record sets the series of rc from its status.
func (m *Metrics) record(rc *v1alpha1.RotationCampaign) {
	if m == nil {
		return
	}
	n := rc.Status.Clusters
	for state, count := range map[v1alpha1.CampaignClusterState]int32{
		v1alpha1.CampaignClusterPending: n.Pending, v1alpha1.CampaignClusterWaiting: n.Waiting, v1alpha1.CampaignClusterInProgress: n.InProgress,
		v1alpha1.CampaignClusterDone: n.Done, v1alpha1.CampaignClusterSkipped: n.Skipped, v1alpha1.CampaignClusterFailed: n.Failed,
	} {
		m.clusters.WithLabelValues(rc.Namespace, rc.Name, string(state)).Set(float64(count))
	}
	halted := 0.0
	if rc.Status.Phase == v1alpha1.CampaignHalted {
		halted = 1
	}
	m.halted.WithLabelValues(rc.Namespace, rc.Name).Set(halted)
}

// forget removes the series of a deleted campaign.
func (m *Metrics) forget(namespace, name string) {
	if m == nil {
		return
	}
	labels := prometheus.Labels{"namespace": namespace, "campaign": name}
	m.clusters.DeletePartialMatch(labels)
	m.halted.DeletePartialMatch(labels)
}
