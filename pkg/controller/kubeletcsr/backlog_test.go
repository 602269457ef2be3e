package kubeletcsr

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func backlogCSR(name, signer string, created time.Time, conditions ...certificatesv1.CertificateSigningRequestCondition) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec:       certificatesv1.CertificateSigningRequestSpec{SignerName: signer},
		Status:     certificatesv1.CertificateSigningRequestStatus{Conditions: conditions},
	}
}

// series is one gathered backlog series: metric, namespace, cluster,
// signer, state.
type series [5]string

// gatherBacklog returns the backlog series reg exposes, with their values.
func gatherBacklog(t *testing.T, reg *prometheus.Registry) map[series]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[series]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "carousel_csr_backlog_") {
			continue
		}
		if f.GetType() != dto.MetricType_GAUGE {
			t.Errorf("%s is a %s, want a gauge", f.GetName(), f.GetType())
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if len(labels) != 4 {
				t.Errorf("%s has labels %v, want namespace, cluster, signer and state", f.GetName(), labels)
			}
			got[series{f.GetName(), labels["namespace"], labels["cluster"], labels["signer"], labels["state"]}] = m.GetGauge().GetValue()
		}
	}
	return got
}

// backlogOfProd is what team-a/prod exposes: the requests of each signer and
// state, zero included, and the oldest's time where one waits.
func backlogOfProd(requests map[[2]string]int, oldest map[[2]string]time.Time) map[series]float64 {
	want := map[series]float64{}
	for _, signer := range backlogSigners {
		for _, state := range backlogStates {
			want[series{"carousel_csr_backlog_requests", "team-a", "prod", signer, state}] = float64(requests[[2]string{signer, state}])
			if at, ok := oldest[[2]string{signer, state}]; ok {
				want[series{"carousel_csr_backlog_oldest_timestamp_seconds", "team-a", "prod", signer, state}] = float64(at.Unix())
			}
		}
	}
	return want
}

func expectBacklog(t *testing.T, reg *prometheus.Registry, want map[series]float64) {
	t.Helper()
	if got := gatherBacklog(t, reg); !maps.Equal(got, want) {
		t.Fatalf("backlog series:\n got %v\nwant %v", got, want)
	}
}

// TestBacklog: the backlog counts, per signer, the requests without a
// decision and the approved ones without a certificate, with the time the
// longest-waiting began to wait; decided, finished, expired and others'
// requests are not in it.
func TestBacklog(t *testing.T) {
	const (
		clientSigner  = certificatesv1.KubeAPIServerClientKubeletSignerName
		servingSigner = certificatesv1.KubeletServingSignerName
	)
	approved := func(at time.Time) certificatesv1.CertificateSigningRequestCondition {
		return conditionAt(certificatesv1.CertificateApproved, at)
	}
	issued := backlogCSR("issued", clientSigner, testNow.Add(-50*time.Minute), approved(testNow.Add(-50*time.Minute)))
	issued.Status.Certificate = []byte("certificate")
	approvedWithoutTime := backlogCSR("approved-without-time", servingSigner, testNow.Add(-20*time.Minute),
		certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateApproved, Status: "True"})
	remote := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(
		backlogCSR("pending-old", clientSigner, testNow.Add(-40*time.Minute)),
		backlogCSR("pending-new", clientSigner, testNow.Add(-time.Minute)),
		// Approved long after its creation: it waits from its approval.
		backlogCSR("approved", clientSigner, testNow.Add(-5*time.Hour), approved(testNow.Add(-3*time.Minute))),
		approvedWithoutTime,
		issued,
		backlogCSR("denied", servingSigner, testNow.Add(-10*time.Minute), conditionAt(certificatesv1.CertificateDenied, testNow.Add(-10*time.Minute))),
		backlogCSR("failed", servingSigner, testNow.Add(-10*time.Minute), approved(testNow.Add(-10*time.Minute)),
			conditionAt(certificatesv1.CertificateFailed, testNow.Add(-9*time.Minute))),
		// Past the pending lifetime: deleted next, not waiting.
		backlogCSR("pending-expired", servingSigner, testNow.Add(-25*time.Hour)),
		backlogCSR("other-signer", "example.com/signer", testNow.Add(-time.Hour)),
	).Build()

	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	key := client.ObjectKey{Namespace: "team-a", Name: "prod"}
	untrack := m.trackBacklog(key, &backlogSource{reader: remote, synced: func() bool { return true }, clock: clocktesting.NewFakePassiveClock(testNow)})

	expectBacklog(t, reg, backlogOfProd(
		map[[2]string]int{{clientSigner, backlogPending}: 2, {clientSigner, backlogApproved}: 1, {servingSigner, backlogApproved}: 1},
		map[[2]string]time.Time{
			{clientSigner, backlogPending}:   testNow.Add(-40 * time.Minute),
			{clientSigner, backlogApproved}:  testNow.Add(-3 * time.Minute),
			{servingSigner, backlogApproved}: testNow.Add(-20 * time.Minute), // no time on the condition: its creation
		}))

	untrack()
	expectBacklog(t, reg, map[series]float64{})
}

// TestBacklogOfNoRequests: a connected cluster without a waiting request
// reports zeros, so that a backlog that clears is told from a cluster that
// is not reported.
func TestBacklogOfNoRequests(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	remote := fake.NewClientBuilder().WithScheme(testScheme(t)).Build()
	m.trackBacklog(client.ObjectKey{Namespace: "team-a", Name: "prod"},
		&backlogSource{reader: remote, synced: func() bool { return true }, clock: clocktesting.NewFakePassiveClock(testNow)})
	expectBacklog(t, reg, backlogOfProd(nil, nil))
}

// TestBacklogWaitsForTheCache: until the connection's cache has synced, the
// cluster reports no backlog rather than a short one.
func TestBacklogWaitsForTheCache(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	remote := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(
		backlogCSR("pending", certificatesv1.KubeAPIServerClientKubeletSignerName, testNow.Add(-time.Hour))).Build()
	synced := false
	m.trackBacklog(client.ObjectKey{Namespace: "team-a", Name: "prod"},
		&backlogSource{reader: remote, synced: func() bool { return synced }, clock: clocktesting.NewFakePassiveClock(testNow)})
	expectBacklog(t, reg, map[series]float64{})
	synced = true
	expectBacklog(t, reg, backlogOfProd(map[[2]string]int{{certificatesv1.KubeAPIServerClientKubeletSignerName, backlogPending}: 1},
		map[[2]string]time.Time{{certificatesv1.KubeAPIServerClientKubeletSignerName, backlogPending}: testNow.Add(-time.Hour)}))
}

// TestBacklogOfAReconnectedCluster: a new connection replaces the old one's
// source, and the old connection's end does not remove the new one's.
func TestBacklogOfAReconnectedCluster(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	key := client.ObjectKey{Namespace: "team-a", Name: "prod"}
	clk := clocktesting.NewFakePassiveClock(testNow)
	synced := func() bool { return true }
	before := fake.NewClientBuilder().WithScheme(testScheme(t)).Build()
	after := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(
		backlogCSR("pending", certificatesv1.KubeAPIServerClientKubeletSignerName, testNow.Add(-time.Hour))).Build()
	untrackBefore := m.trackBacklog(key, &backlogSource{reader: before, synced: synced, clock: clk})
	m.trackBacklog(key, &backlogSource{reader: after, synced: synced, clock: clk})
	untrackBefore()
	expectBacklog(t, reg, backlogOfProd(map[[2]string]int{{certificatesv1.KubeAPIServerClientKubeletSignerName, backlogPending}: 1},
		map[[2]string]time.Time{{certificatesv1.KubeAPIServerClientKubeletSignerName, backlogPending}: testNow.Add(-time.Hour)}))
}

// TestNilMetricsTrackNothing: the controllers run without metrics too.
func TestNilMetricsTrackNothing(t *testing.T) {
	var m *Metrics
	m.trackBacklog(client.ObjectKey{Namespace: "team-a", Name: "prod"}, &backlogSource{})()
}
