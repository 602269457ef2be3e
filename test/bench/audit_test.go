package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/auditwebhook"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

// BenchmarkAuditTraffic measures the audit receiver under a fleet's
// traffic: AUDIT_CLUSTERS (200) Clusters, each standing for the API server of
// a cluster with AUDIT_CLIENTS (150) clients on client certificates, send
// the manager batches of 400 audit events over HTTPS, as kube-apiserver's
// webhook backend does, AUDIT_BATCHES_PER_SECOND (40) in all, each Cluster in
// turn. A first AUDIT_WARMUP (70s) creates every Cluster's usage record and
// writes the sightings that waited after it; then AUDIT_WINDOW (2m) is
// measured. It reports, for each, the answers by code, the manager's CPU per
// batch, and per Cluster and minute its reads of ConfigMaps (the usage
// records) and of Clusters, its Cluster reconciles and its writes; and the
// manager's live heap at the end against before the traffic, and its peak
// RSS. A batch the receiver refuses is counted, not sent again. With
// AUDIT_PROFILE_DIR set, the manager's heap profile at the end goes there
// (audit.heap.pprof).
func BenchmarkAuditTraffic(b *testing.B) {
	_, manager := controlPlaneAndManager(b, "bench-audit")
	n := envOr(b, "AUDIT_CLUSTERS", 200, strconv.Atoi)
	clients := envOr(b, "AUDIT_CLIENTS", 150, strconv.Atoi)
	rate := envOr(b, "AUDIT_BATCHES_PER_SECOND", 40.0, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) })
	warmup := envOr(b, "AUDIT_WARMUP", 70*time.Second, time.ParseDuration)
	window := envOr(b, "AUDIT_WINDOW", 2*time.Minute, time.ParseDuration)
	profiles := os.Getenv("AUDIT_PROFILE_DIR")
	ctx := context.Background()
	ctrl.SetLogger(logr.Discard())

	var managerWrites func() []write
	mgmt := startManagement(b, func(env *envtest.Environment) { managerWrites = auditManagerWrites(b, env) })
	defer mgmt.stop()
	// The webhook server serves on loopback with the serving certificate
	// envtest made for webhooks.
	serving := mgmt.env.WebhookInstallOptions
	caFile := filepath.Join(b.TempDir(), "webhook-ca.crt")
	check(b, os.WriteFile(caFile, serving.LocalServingCAData, 0o600))
	host, port, err := net.SplitHostPort(loopbackAddress(b))
	check(b, err)
	base := "https://" + net.JoinHostPort(host, port) + "/audit"
	proc := startManager(b, manager, mgmt.kubeconfig, true, "--webhook=true", "--webhook-host="+host, "--webhook-port="+port,
		"--webhook-cert-dir="+serving.LocalServingCertDir, "--audit-webhook-url="+base, "--audit-webhook-ca-file="+caFile)
	defer proc.stop()

	clusters, stopCache := mgmt.watchClusters(b, ctx)
	defer stopCache()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(serving.LocalServingCAData) {
		b.Fatal("envtest's webhook CA does not parse")
	}
	sender := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 64}}

	for b.Loop() {
		f := &fleet{k8s: mgmt.k8s, cache: clusters, ns: "audit", n: n, writes: func() int { return len(managerWrites()) }}
		check(b, f.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))
		f.create(b, ctx)
		f.waitFor(b, ctx, func(c *v1alpha1.Cluster) bool {
			return meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionReady)
		})
		senders := make([]auditSender, n)
		f.each(b, func(i int) error {
			secret := &corev1.Secret{}
			if err := f.k8s.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: credentials.AuditWebhookSecretName(f.name(i))}, secret); err != nil {
				return err
			}
			senders[i] = auditSender{url: base + "/" + f.ns + "/" + f.name(i), token: string(secret.Data[auditwebhook.DataKeyToken]),
				body: auditBatchTemplate(f.name(i), clients)}
			return nil
		})

		// Two collections: the second drops what sync.Pools kept through the
		// first (the receiver's buffers of whole batches).
		settled := func() managerSample { proc.sample(b); return proc.sample(b) }
		before := settled()
		proc.peakRSSSinceLastReading(b)
		traffic := &auditTraffic{client: sender, senders: senders, rate: rate}
		step := func(d time.Duration) auditStep {
			m := markAudit(b, mgmt, proc, f)
			return m.since(b, mgmt, proc, f, traffic.send(b, ctx, d))
		}
		warm, measured := step(warmup), step(window)
		after := settled() // the sightings of the last minute still wait
		heapPerCluster := (after.heap - before.heap) / 1024 / float64(n)
		if profiles != "" {
			check(b, os.MkdirAll(profiles, 0o755))
			check(b, proc.profile("heap", filepath.Join(profiles, "audit.heap.pprof")))
		}
		fmt.Printf("audit traffic of %d Clusters of %d clients each, %.0f batches of 400 events a second: the manager's live heap %.1f → %.1f MiB "+
			"(%+.1f KiB a Cluster), peak RSS %.0f MiB\n", n, clients, rate, before.heapMiB(), after.heapMiB(), heapPerCluster,
			float64(proc.peakRSSSinceLastReading(b))/(1<<20))
		fmt.Println("the first " + warmup.String() + " (every record created): " + warm.String())
		fmt.Println("the next " + window.String() + ": " + measured.String())
		b.ReportMetric(measured.cpuPerBatch(), "cpu-ms/batch")
		b.ReportMetric(heapPerCluster, "heap-KiB/cluster")
		b.ReportMetric(measured.perClusterMinute(measured.requests["GET configmaps"]), "record-reads/cluster-min")
	}
}

// auditSender is what sends one Cluster's batches: its receiver URL and
// token, and a batch with auditTimestamp where its events' times go.
type auditSender struct {
	url, token string
	body       []byte
}

// auditTimestamp marks the times in a batch template.
const auditTimestamp = "2006-01-02T15:04:05.000000Z"

// auditBatchTemplate is a batch of 400 events at the Metadata level, as
// kube-apiserver writes them, from the clients (kubelets, each with a client
// certificate of its own) of cluster in turn.
func auditBatchTemplate(cluster string, clients int) []byte {
	var buf bytes.Buffer
	buf.WriteString(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[`)
	for i := range 400 {
		if i > 0 {
			buf.WriteByte(',')
		}
		client := i % clients
		sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", cluster, client))
		fmt.Fprintf(&buf, `{"level":"Metadata","auditID":"0b9f8b1e-6a3c-4c55-9a43-5d2f1f6f%04x","stage":"ResponseComplete",`+
			`"requestURI":"/api/v1/nodes/worker-%03d?timeout=10s","verb":"get","user":{"username":"system:node:worker-%03d",`+
			`"groups":["system:nodes","system:authenticated"],"extra":{"authentication.kubernetes.io/credential-id":["X509SHA256=%s"]}},`+
			`"sourceIPs":["192.0.2.17"],"userAgent":"kubelet/v1.36.3 (linux/amd64) kubernetes/4d63c2d",`+
			`"objectRef":{"resource":"nodes","name":"worker-%03d","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},`+
			`"requestReceivedTimestamp":"%s","stageTimestamp":"%s",`+
			`"annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":""}}`,
			i, client, client, hex.EncodeToString(sum[:]), client, auditTimestamp, auditTimestamp)
	}
	buf.WriteString(`]}`)
	return buf.Bytes()
}

// auditTraffic sends the senders' batches, each in turn.
type auditTraffic struct {
	client  *http.Client
	senders []auditSender
	rate    float64
	next    int
}

// send sends rate batches a second for d, each batch's events at the moment
// it is sent, from up to 32 at once (the receiver's bound of batches in
// flight), and counts the answers by status code (0: no answer). A batch due
// while all 32 wait for an answer is counted as 0 too.
func (t *auditTraffic) send(b *testing.B, ctx context.Context, d time.Duration) map[int]int64 {
	b.Helper()
	var mu sync.Mutex
	answers := map[int]int64{}
	count := func(code int) {
		mu.Lock()
		answers[code]++
		mu.Unlock()
	}
	slots := make(chan struct{}, 32)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / t.rate))
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		select {
		case slots <- struct{}{}:
		default:
			count(0)
			continue
		}
		s := t.senders[t.next%len(t.senders)]
		t.next++
		wg.Go(func() {
			defer func() { <-slots }()
			at := []byte(time.Now().UTC().Format(auditTimestamp))
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(bytes.ReplaceAll(s.body, []byte(auditTimestamp), at)))
			if err != nil {
				count(0)
				return
			}
			req.Header.Set("Authorization", "Bearer "+s.token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := t.client.Do(req)
			if err != nil {
				count(0)
				return
			}
			_ = resp.Body.Close()
			count(resp.StatusCode)
		})
	}
	wg.Wait()
	return answers
}

// auditMark is what the manager and the API server had done by a moment.
type auditMark struct {
	at                 time.Time
	cpu                time.Duration
	reconciles, writes int
	requests           requestCounts
}

func markAudit(b *testing.B, mgmt *management, proc *process, f *fleet) auditMark {
	b.Helper()
	return auditMark{at: time.Now(), cpu: proc.cpu(b), reconciles: proc.reconciles(b), writes: f.writes(), requests: mgmt.requests(b)}
}

// auditStep is what a step of traffic cost, for n Clusters.
type auditStep struct {
	n                  int
	wall, cpu          time.Duration
	answers            map[int]int64
	reconciles, writes int
	requests           requestCounts
}

func (m auditMark) since(b *testing.B, mgmt *management, proc *process, f *fleet, answers map[int]int64) auditStep {
	b.Helper()
	writes := f.writes()
	return auditStep{n: f.n, wall: time.Since(m.at), cpu: proc.cpu(b) - m.cpu, answers: answers, reconciles: proc.reconciles(b) - m.reconciles,
		writes: writes - m.writes, requests: mgmt.requests(b).since(m.requests)}
}

func (s auditStep) sent() int64 {
	var sent int64
	for _, count := range s.answers {
		sent += count
	}
	return sent
}

// cpuPerBatch is the manager's CPU per batch it answered.
func (s auditStep) cpuPerBatch() float64 {
	return float64(s.cpu.Microseconds()) / 1000 / float64(max(s.sent()-s.answers[0], 1))
}

func (s auditStep) perClusterMinute(v float64) float64 { return v / float64(s.n) / s.wall.Minutes() }

func (s auditStep) String() string {
	return fmt.Sprintf("%d batches due, answers %v (0: not sent, all 32 senders waiting, or no answer), %.0f events/s received; "+
		"manager %.1f ms of CPU a batch answered; per Cluster and minute the API server's reads of ConfigMaps %.2f and of Clusters %.2f, "+
		"%.2f Cluster reconciles, %.2f manager writes",
		s.sent(), s.answers, float64(s.answers[http.StatusOK]*400)/s.wall.Seconds(), s.cpuPerBatch(),
		s.perClusterMinute(s.requests["GET configmaps"]), s.perClusterMinute(s.requests["GET clusters"]),
		s.perClusterMinute(float64(s.reconciles)), s.perClusterMinute(float64(s.writes)))
}

// requests reads how many requests the API server has served, by verb and
// resource ("GET configmaps").
func (m *management) requests(b *testing.B) requestCounts {
	b.Helper()
	counts := requestCounts{}
	if family := m.metrics(b)["apiserver_request_total"]; family != nil {
		for _, m := range family.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			counts[labels["verb"]+" "+labels["resource"]] += m.GetCounter().GetValue()
		}
	}
	return counts
}

// requestCounts are the API server's requests by verb and resource.
type requestCounts map[string]float64

// since is what c counts beyond before.
func (c requestCounts) since(before requestCounts) requestCounts {
	out := requestCounts{}
	for k, v := range c {
		out[k] = v - before[k]
	}
	return out
}
