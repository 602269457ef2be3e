package bench

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/test/framework"
)

// BenchmarkManagedConnections measures what a managed-cluster connection
// costs the manager. CONNECTIONS Clusters (20 by default) name real control
// planes as their endpoints, each an etcd and a kube-apiserver of its own
// started on the credentials Carousel issued; they start once Carousel has
// issued them all, and each counts once the manager has published
// cluster-info in it. The manager's heap (after a forced collection), resident
// memory and goroutines are read before the first starts and once all are
// connected; their growth divided by the connections is the cost of one,
// projected to 1,000. The watches of a connection are those a managed API
// server serves beyond an identical control plane that no Cluster names.
// `make bench-connections` runs it.
func BenchmarkManagedConnections(b *testing.B) {
	assets, manager := controlPlaneAndManager(b, "bench-connections")
	n := envOr(b, "CONNECTIONS", 20, strconv.Atoi)
	if n < 2 {
		b.Fatalf("CONNECTIONS=%d: measure at least two connections", n)
	}
	ctx := context.Background()
	ctrl.SetLogger(logr.Discard())
	mgmt := startManagement(b, nil)
	defer mgmt.stop()
	proc := startManager(b, manager, mgmt.kubeconfig, true)
	defer proc.stop()

	for b.Loop() {
		namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "connections-"}}
		check(b, mgmt.k8s.Create(ctx, namespace))
		ns := namespace.Name
		planes, clusters := make([]*framework.ManagedControlPlane, n), make([]*v1alpha1.Cluster, n)
		for i := range planes {
			planes[i] = &framework.ManagedControlPlane{BinDir: assets, Dir: b.TempDir()}
			check(b, planes[i].ReservePorts())
			defer planes[i].Stop()
			clusters[i] = &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("m-%02d", i)},
				Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3", ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: planes[i].Endpoint()}}}
			check(b, mgmt.k8s.Create(ctx, clusters[i]))
		}
		admins := make([]kubernetes.Interface, n)
		for i, plane := range planes {
			check(b, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
				return plane.WriteCredentials(ctx, mgmt.k8s, clusters[i]) == nil, nil // until Carousel issued them all
			}))
			admins[i] = adminClient(b, ctx, mgmt.k8s, clusters[i], plane)
		}

		before := proc.sample(b)
		saveProfiles(b, proc, "before")
		start := time.Now()
		for _, plane := range planes {
			check(b, plane.Start(ctx))
		}
		started := time.Since(start)
		// Each Cluster has failed to connect since it was issued: the wait
		// after the last plane started is the retry backoff, at most
		// kubeletbootstrap.MaxRetryInterval.
		published := map[int]bool{}
		check(b, wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			for i, admin := range admins {
				if published[i] {
					continue
				}
				if _, err := admin.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{}); err == nil {
					published[i] = true
				}
			}
			return len(published) == n, nil
		}))
		connected := time.Since(start)
		after := proc.sample(b)
		saveProfiles(b, proc, "after")

		// The same control plane as the first Cluster's, which no Cluster
		// names: the watches it serves are the API server's own.
		control := &framework.ManagedControlPlane{BinDir: assets, Dir: b.TempDir()}
		check(b, control.WriteCredentials(ctx, mgmt.k8s, clusters[0]))
		check(b, control.Start(ctx))
		defer control.Stop()
		own := watches(b, ctx, adminClient(b, ctx, mgmt.k8s, clusters[0], control))
		extra := map[string]float64{}
		for _, admin := range admins {
			for resource, count := range watches(b, ctx, admin) {
				extra[resource] += (count - own[resource]) / float64(n)
			}
		}
		var perResource []string
		totalWatches := 0.0
		for _, resource := range slices.Sorted(maps.Keys(extra)) {
			if extra[resource] != 0 {
				perResource = append(perResource, fmt.Sprintf("%s %.1f", resource, extra[resource]))
				totalWatches += extra[resource]
			}
		}

		per := after.minus(before).per(n)
		b.ReportMetric(per.heapMiB(), "heap-MiB/connection")
		b.ReportMetric(per.rssMiB(), "rss-MiB/connection")
		b.ReportMetric(per.goroutines, "goroutines/connection")
		b.ReportMetric(totalWatches, "watches/connection")
		fmt.Printf("managed connections: %d control planes started in %.1fs, all connected %.1fs after the first started; "+
			"manager before the first: heap %.1f MiB, RSS %.0f MiB, %.0f goroutines; after: heap %.1f MiB, RSS %.0f MiB, %.0f goroutines\n",
			n, started.Seconds(), connected.Seconds(), before.heapMiB(), before.rssMiB(), before.goroutines,
			after.heapMiB(), after.rssMiB(), after.goroutines)
		thousand := before.plus(per.times(1000))
		fmt.Printf("per connection: heap %.2f MiB, RSS %.2f MiB, %.1f goroutines, %.1f watches (%s); "+
			"projected to 1,000 connections: heap %.0f MiB, RSS %.0f MiB, %.0f goroutines, %.0f watches\n",
			per.heapMiB(), per.rssMiB(), per.goroutines, totalWatches, strings.Join(perResource, ", "),
			thousand.heapMiB(), thousand.rssMiB(), thousand.goroutines, 1000*totalWatches)
	}
}

// saveProfiles writes the manager's heap and goroutine profiles to
// CONNECTIONS_PROFILE_DIR, when set, as <when>.heap.pprof and
// <when>.goroutine.pprof: `go tool pprof -base before.heap.pprof
// after.heap.pprof` shows what the connections hold.
func saveProfiles(b *testing.B, proc *process, when string) {
	b.Helper()
	dir := os.Getenv("CONNECTIONS_PROFILE_DIR")
	if dir == "" {
		return
	}
	check(b, proc.profile("heap?gc=1", filepath.Join(dir, when+".heap.pprof")))
	check(b, proc.profile("goroutine", filepath.Join(dir, when+".goroutine.pprof")))
}

// managerSample is what the manager holds at one moment.
type managerSample struct {
	heap, rss, goroutines float64 // bytes, bytes, count
}

func (s managerSample) minus(o managerSample) managerSample {
	return managerSample{s.heap - o.heap, s.rss - o.rss, s.goroutines - o.goroutines}
}

func (s managerSample) plus(o managerSample) managerSample {
	return managerSample{s.heap + o.heap, s.rss + o.rss, s.goroutines + o.goroutines}
}

func (s managerSample) times(k float64) managerSample {
	return managerSample{s.heap * k, s.rss * k, s.goroutines * k}
}

func (s managerSample) per(n int) managerSample { return s.times(1 / float64(n)) }
func (s managerSample) heapMiB() float64        { return s.heap / (1 << 20) }
func (s managerSample) rssMiB() float64         { return s.rss / (1 << 20) }

// sample reads the manager's live heap, after a collection its heap profile
// forces, its resident memory and its goroutines.
func (p *process) sample(b *testing.B) managerSample {
	b.Helper()
	resp, err := http.Get("http://" + p.pprof + "/debug/pprof/heap?gc=1") //nolint:noctx // a loopback read
	check(b, err)
	_ = resp.Body.Close()
	families := p.metrics(b)
	return managerSample{
		heap:       sum(families["go_memstats_heap_alloc_bytes"], nil),
		rss:        sum(families["process_resident_memory_bytes"], nil),
		goroutines: sum(families["go_goroutines"], nil),
	}
}

// adminClient is a client of plane on the admin credentials Carousel issued
// for cluster.
func adminClient(b *testing.B, ctx context.Context, c client.Reader, cluster *v1alpha1.Cluster, plane *framework.ManagedControlPlane) kubernetes.Interface {
	b.Helper()
	cfg, err := framework.RESTConfig(ctx, c, cluster, credentials.CertAdmin)
	check(b, err)
	cfg.Host = plane.Endpoint()
	admin, err := kubernetes.NewForConfig(cfg)
	check(b, err)
	return admin
}

// watches counts the watches an API server serves now, by resource.
func watches(b *testing.B, ctx context.Context, admin kubernetes.Interface) map[string]float64 {
	b.Helper()
	raw, err := admin.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	check(b, err)
	families, err := parseMetrics(strings.NewReader(string(raw)))
	check(b, err)
	out := map[string]float64{}
	for _, m := range families["apiserver_longrunning_requests"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["verb"] == "WATCH" {
			out[strings.TrimPrefix(labels["group"]+"/"+labels["resource"], "/")] += m.GetGauge().GetValue()
		}
	}
	return out
}
