package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	clustercontroller "github.com/carousel-dev/carousel/pkg/controller/cluster"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/oldca"
	"github.com/carousel-dev/carousel/pkg/scheme"
	"github.com/carousel-dev/carousel/test/framework"
)

// BenchmarkFleet measures one manager with a fleet: FLEET_CLUSTERS Clusters
// (1,000 by default) without endpoints on one API server, and the manager
// binary (CAROUSEL_MANAGER) as its own process, so that its CPU time and
// memory are its own. It reports the time until every Cluster is Ready, the
// manager's CPU per new Cluster, its API writes and CPU in an idle window of
// FLEET_IDLE (a minute by default) with the Cluster reconciles in it, the time from start-ca-rotation on every
// Cluster until all are Prepared and from complete-ca-rotation until all are
// Completed, the same two steps once more through one RotationCampaign of
// FLEET_CAMPAIGN_MAX_CONCURRENT (100% by default: a number or a
// percentage), and the manager's peak resident memory; and, per Cluster in
// each step (the creation, each phase, the campaign), the manager's CPU, its
// Cluster reconciles and its writes by verb and resource; and, for each
// step, where the machine's CPU went, the API server's requests a second and
// the shortest the step could be with the API server alone on the machine;
// last, what one request of each kind a phase is made of costs the API
// server (requestCosts).
// FLEET_MANAGER_FLAGS adds flags to the manager's, FLEET_MANAGER_ENV variables to its
// environment (GOMEMLIMIT=460MiB, say). With FLEET_PROFILE_DIR set, it writes there
// the manager's and the API server's CPU profiles of the first createProfileWindow of the
// Clusters' creation (create.cpu.pprof, apiserver-create.cpu.pprof) and the API server's of the first
// rotation's start (apiserver-preparing.cpu.pprof), the manager's of the idle window (idle.cpu.pprof), and its heap
// profiles once half the Clusters are Prepared (preparing.heap.pprof) and
// once all are Completed (completed.heap.pprof), read through
// --pprof-bind-address. Last, it gives every Cluster a record of
// FLEET_USAGE_CREDENTIALS (200 by default; 0 skips it) client certificates in
// use, as the audit receiver keeps one, and reports what the records added
// to the manager's live heap. `make bench-fleet` runs it; the figures are in
// docs/development.md.
func BenchmarkFleet(b *testing.B) {
	_, manager := controlPlaneAndManager(b, "bench-fleet")
	n := envOr(b, "FLEET_CLUSTERS", 1000, strconv.Atoi)
	campaignConcurrency := envOr(b, "FLEET_CAMPAIGN_MAX_CONCURRENT", "100%", func(s string) (string, error) { return s, nil })
	idle := envOr(b, "FLEET_IDLE", time.Minute, time.ParseDuration)
	usageCredentials := envOr(b, "FLEET_USAGE_CREDENTIALS", 200, strconv.Atoi)
	ctx := context.Background()
	ctrl.SetLogger(logr.Discard())

	var managerWrites func() []write
	mgmt := startManagement(b, func(env *envtest.Environment) { managerWrites = auditManagerWrites(b, env) })
	defer mgmt.stop()
	writes := func() int { return len(managerWrites()) }
	k8s := mgmt.k8s
	clusters, stopCache := mgmt.watchClusters(b, ctx)
	defer stopCache()

	profiles := os.Getenv("FLEET_PROFILE_DIR")
	if profiles != "" {
		check(b, os.MkdirAll(profiles, 0o755))
	}
	proc := startManager(b, manager, mgmt.kubeconfig, profiles != "" || usageCredentials > 0)
	defer proc.stop()
	// The API server shares the two cores: its CPU says when it is the limit.
	apiserver := childProcess(b, "kube-apiserver")

	for b.Loop() {
		f := &fleet{k8s: k8s, cache: clusters, ns: "fleet", n: n, writes: writes}
		check(b, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))

		perCluster := func(writes int) float64 { return float64(writes) / float64(n) }
		// steps says, per Cluster, what the manager did in each step since
		// mark: its CPU, its Cluster reconciles and its writes by kind.
		type mark struct {
			cpu                time.Duration
			writes, reconciles int
			load               load
		}
		// Each step's peak RSS is its own: reading one starts the next.
		var peak int64
		stepPeakRSS := func() int64 {
			rss := proc.peakRSSSinceLastReading(b)
			peak = max(peak, rss)
			return rss
		}
		markNow := func() mark {
			stepPeakRSS()
			m := mark{cpu: proc.cpu(b), writes: writes(), reconciles: proc.reconciles(b)}
			m.load = mgmt.load(b) // last: after reading the audit log
			return m
		}
		var steps, loads []string
		step := func(name string, since mark) {
			// First: reading the audit log below takes seconds of a fleet's.
			loads = append(loads, name+": "+mgmt.load(b).since(since.load, n))
			steps = append(steps, fmt.Sprintf("%s: %.1f ms manager CPU, %.1f Cluster reconciles, peak RSS %.0f MiB, writes %s", name,
				float64((proc.cpu(b)-since.cpu).Microseconds())/1000/float64(n), perCluster(proc.reconciles(b)-since.reconciles),
				float64(stepPeakRSS())/(1<<20), writeKinds(managerWrites()[since.writes:], n)))
		}
		created := markNow()
		cpuBefore, writesBefore, apiCPUBefore := created.cpu, created.writes, apiserver.cpu(b)
		var creating errgroup.Group
		if profiles != "" {
			creating.Go(func() error {
				return proc.profile(fmt.Sprintf("profile?seconds=%d", int(createProfileWindow.Seconds())), filepath.Join(profiles, "create.cpu.pprof"))
			})
			creating.Go(func() error {
				return mgmt.profile(ctx, createProfileWindow, filepath.Join(profiles, "apiserver-create.cpu.pprof"))
			})
		}
		start := time.Now()
		f.create(b, ctx)
		f.waitFor(b, ctx, func(c *v1alpha1.Cluster) bool {
			return meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionReady)
		})
		toReady := time.Since(start)
		cpuPerCluster := (proc.cpu(b) - cpuBefore) / time.Duration(n)
		readyWrites, readyAPICPU := writes()-writesBefore, apiserver.cpu(b)-apiCPUBefore
		step("to Ready", created)
		check(b, creating.Wait())

		cpuBefore, writesBefore, reconcilesBefore := proc.cpu(b), writes(), proc.reconciles(b)
		if profiles != "" {
			// The profile's request lasts the window.
			check(b, proc.profile(fmt.Sprintf("profile?seconds=%d", int(idle.Seconds())), filepath.Join(profiles, "idle.cpu.pprof")))
		} else {
			time.Sleep(idle) // a window measured, not a wait for a condition
		}
		idleWrites, idleCPU, idleReconciles := writes()-writesBefore, proc.cpu(b)-cpuBefore, proc.reconciles(b)-reconcilesBefore
		for _, w := range managerWrites()[writesBefore:][:min(idleWrites, 10)] {
			fmt.Println("write in the idle window:", w, f.eventOf(ctx, w))
		}

		preparing := markNow()
		writesBefore, apiCPUBefore, start = preparing.writes, apiserver.cpu(b), time.Now()
		prepared := func(c *v1alpha1.Cluster) bool { return c.CARotationPhase() == v1alpha1.RotationPrepared }
		halfwayCtx, stopHalfway := context.WithCancel(ctx)
		defer stopHalfway() // a Fatal in waitFor leaves it waiting otherwise
		halfway, halfwayCtx := errgroup.WithContext(halfwayCtx)
		if profiles != "" {
			// From the first annotation on.
			halfway.Go(func() error {
				return mgmt.profile(halfwayCtx, createProfileWindow, filepath.Join(profiles, "apiserver-preparing.cpu.pprof"))
			})
		}
		f.annotate(b, ctx, v1alpha1.OperationStartCARotation)
		if profiles != "" {
			// The peak is in the rotations: what is live halfway through one.
			halfway.Go(func() error {
				if err := f.waitForSome(halfwayCtx, (n+1)/2, prepared); err != nil {
					return err
				}
				return proc.profile("heap", filepath.Join(profiles, "preparing.heap.pprof"))
			})
		}
		f.waitFor(b, ctx, prepared)
		toPrepared, preparingWrites, preparingAPICPU := time.Since(start), writes()-writesBefore, apiserver.cpu(b)-apiCPUBefore
		step("start→Prepared", preparing)
		check(b, halfway.Wait())
		finalizing := markNow()
		writesBefore, apiCPUBefore, start = finalizing.writes, apiserver.cpu(b), time.Now()
		f.annotate(b, ctx, v1alpha1.OperationCompleteCARotation)
		f.waitFor(b, ctx, func(c *v1alpha1.Cluster) bool { return c.CARotationPhase() == v1alpha1.RotationCompleted })
		toCompleted, finalizingWrites, finalizingAPICPU := time.Since(start), writes()-writesBefore, apiserver.cpu(b)-apiCPUBefore
		step("complete→Completed", finalizing)

		// The same rotation once more, driven by one RotationCampaign in waves of FLEET_CAMPAIGN_MAX_CONCURRENT.
		campaigned := markNow()
		waves := f.campaign(b, ctx, intstr.Parse(campaignConcurrency))
		step("a RotationCampaign's start→Completed", campaigned)
		stepPeakRSS()
		if profiles != "" {
			check(b, proc.profile("heap", filepath.Join(profiles, "completed.heap.pprof")))
		}
		var records recordCost
		if usageCredentials > 0 {
			records = f.usageRecords(b, ctx, proc, usageCredentials)
		}
		// Nothing else watches or writes while the costs are measured.
		proc.stop()
		stopCache()
		costs := f.requestCosts(b, ctx, mgmt, apiserver, usageCredentials > 0)

		b.ReportMetric(float64(n)/toReady.Seconds(), "clusters-ready/s")
		b.ReportMetric(float64(cpuPerCluster.Microseconds())/1000, "cpu-ms/cluster")
		b.ReportMetric(float64(idleWrites), "idle-writes")
		b.ReportMetric(idleCPU.Seconds(), "idle-cpu-s")
		b.ReportMetric(float64(idleReconciles), "idle-reconciles")
		b.ReportMetric(toPrepared.Seconds(), "s-to-prepared")
		b.ReportMetric(toCompleted.Seconds(), "s-to-completed")
		b.ReportMetric(waves.toPrepared.Seconds(), "s-campaign-to-prepared")
		b.ReportMetric(waves.toCompleted.Seconds(), "s-campaign-to-completed")
		b.ReportMetric(float64(peak)/(1<<20), "peak-rss-MiB")
		// The API server's share of the two cores while the manager worked.
		busy := func(cpu, wall time.Duration) float64 { return 100 * cpu.Seconds() / wall.Seconds() }
		fmt.Printf("fleet of %d Clusters: Ready after %.1fs (%.1f/s, %.1f ms manager CPU and %.1f writes each; API server %.0f%% CPU); "+
			"idle %s: %d writes, %.2fs CPU, %d Cluster reconciles; start→all Prepared %.1fs (%.1f writes each; API server %.0f%% CPU), "+
			"complete→all Completed %.1fs (%.1f writes each; API server %.0f%% CPU); a RotationCampaign of maxConcurrent %s: start→Prepared %.1fs, "+
			"complete→Completed %.1fs (%.1f writes each); manager peak RSS %.0f MiB\n",
			n, toReady.Seconds(), float64(n)/toReady.Seconds(), float64(cpuPerCluster.Microseconds())/1000, perCluster(readyWrites), busy(readyAPICPU, toReady),
			idle, idleWrites, idleCPU.Seconds(), idleReconciles,
			toPrepared.Seconds(), perCluster(preparingWrites), busy(preparingAPICPU, toPrepared),
			toCompleted.Seconds(), perCluster(finalizingWrites), busy(finalizingAPICPU, toCompleted),
			campaignConcurrency, waves.toPrepared.Seconds(), waves.toCompleted.Seconds(), perCluster(waves.writes),
			float64(peak)/(1<<20))
		for _, s := range steps {
			fmt.Println("per Cluster, " + s)
		}
		for _, l := range loads {
			fmt.Println("the machine, " + l)
		}
		fmt.Println("the API server's CPU per request as the manager's, one at a time with the manager stopped: " + costs)
		if usageCredentials > 0 {
			fmt.Printf("a record of %d client certificates in use per Cluster (%.1f KiB each): the manager's live heap %+.1f MiB, "+
				"%.1f KiB per Cluster; %d writes, peak RSS %.0f MiB\n", usageCredentials, float64(records.bytes)/1024,
				records.heap/(1<<20), records.heap/1024/float64(n), records.writes, float64(records.peakRSS)/(1<<20))
		}
	}
}

// writeKinds counts writes by verb and resource, per Cluster of a fleet of
// n, most first: "21.0 create secrets, 2.0 patch clusters/status".
func writeKinds(writes []write, n int) string {
	counts := map[string]int{}
	for _, w := range writes {
		kind := w.verb + " " + w.ref.Resource
		if w.ref.Subresource != "" {
			kind += "/" + w.ref.Subresource
		}
		counts[kind]++
	}
	kinds := slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
		return cmp.Or(counts[b]-counts[a], strings.Compare(a, b))
	})
	parts := make([]string, len(kinds))
	for i, kind := range kinds {
		parts[i] = fmt.Sprintf("%.1f %s", float64(counts[kind])/float64(n), kind)
	}
	return strings.Join(parts, ", ")
}

// createProfileWindow is how much of the fleet's creation a CPU profile
// covers: it starts with the first Cluster and may outlast the last.
const createProfileWindow = 20 * time.Second

// fleet is the benchmark's Clusters: n of them in namespace ns, written
// through k8s and read from cache.
type fleet struct {
	k8s   client.Client
	cache cache.Cache
	ns    string
	n     int
	// writes counts the manager's API writes so far.
	writes func() int
}

// fleetLabels label every Cluster of the fleet; its campaign selects them.
var fleetLabels = map[string]string{"carousel.dev/bench": "fleet"}

// campaignRun is how long a RotationCampaign took through each step, and
// the manager's writes in both.
type campaignRun struct {
	toPrepared, toCompleted time.Duration
	writes                  int
}

// campaign rotates the whole fleet with one RotationCampaign of
// maxConcurrent: it creates it at the Start step, waits until it is
// Prepared, moves it to Complete and waits until it is Completed.
func (f *fleet) campaign(b *testing.B, ctx context.Context, maxConcurrent intstr.IntOrString) campaignRun {
	b.Helper()
	rc := &v1alpha1.RotationCampaign{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "fleet-wave"},
		Spec: v1alpha1.RotationCampaignSpec{Selector: metav1.LabelSelector{MatchLabels: fleetLabels}, MaxConcurrent: &maxConcurrent}}
	waitFor := func(phase v1alpha1.CampaignPhase) {
		check(b, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := f.k8s.Get(ctx, client.ObjectKeyFromObject(rc), rc); err != nil {
				return false, err
			}
			if rc.Status.Phase == v1alpha1.CampaignHalted {
				return false, fmt.Errorf("the campaign halted: %v", rc.Status.Blocking)
			}
			return rc.Status.ObservedGeneration == rc.Generation && rc.Status.Phase == phase, nil
		}))
	}
	var run campaignRun
	writesBefore, start := f.writes(), time.Now()
	check(b, f.k8s.Create(ctx, rc))
	waitFor(v1alpha1.CampaignPrepared)
	run.toPrepared = time.Since(start)
	start = time.Now()
	patch := client.MergeFrom(rc.DeepCopy())
	rc.Spec.Step = v1alpha1.CampaignComplete
	check(b, f.k8s.Patch(ctx, rc, patch))
	waitFor(v1alpha1.CampaignCompleted)
	run.toCompleted, run.writes = time.Since(start), f.writes()-writesBefore
	return run
}

func (f *fleet) name(i int) string { return fmt.Sprintf("c-%04d", i) }

// requestCosts measures the API server's CPU for one request of each kind
// that a phase is made of, sent one at a time as the manager's user to the
// first Cluster and its objects once the manager has stopped: a merge patch
// of the Cluster's status and of its annotations (a custom resource, which
// the API server handles as JSON against its schema), and an update of one
// of its CA Secrets and of a trust-bundle ConfigMap (a change of an
// annotation, the same bytes through the same path as a change of data);
// with records, a read of the first Cluster's usage record from the API
// server's watch cache and one of the latest.
func (f *fleet) requestCosts(b *testing.B, ctx context.Context, mgmt *management, apiserver *process, records bool) string {
	b.Helper()
	const requests = 500
	cfg, err := clientcmd.BuildConfigFromFlags("", mgmt.kubeconfig)
	check(b, err)
	cfg.QPS = -1
	manager, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	check(b, err)
	name := f.name(0)
	secret, configMap := &corev1.Secret{}, &corev1.ConfigMap{}
	check(b, manager.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: credentials.CASecretName(name, v1alpha1.CARoleClient)}, secret))
	check(b, manager.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: credentials.BundleConfigMapName(name, v1alpha1.CARoleClient)}, configMap))
	cluster := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
	mergePatch := func(format string, i int) client.Patch {
		return client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, format, i))
	}
	const annotation = "carousel.dev/bench-request-cost"
	type request struct {
		kind string
		do   func(i int) error
	}
	kinds := []request{
		{"Cluster status patch", func(i int) error {
			return manager.Status().Patch(ctx, cluster, mergePatch(`{"status":{"observedGeneration":%d}}`, 1_000_000+i))
		}},
		{"Cluster patch", func(i int) error {
			return manager.Patch(ctx, cluster, mergePatch(`{"metadata":{"annotations":{"`+annotation+`":"%d"}}}`, i))
		}},
		{"Secret update", func(i int) error {
			metav1.SetMetaDataAnnotation(&secret.ObjectMeta, annotation, strconv.Itoa(i))
			return manager.Update(ctx, secret)
		}},
		{"ConfigMap update", func(i int) error {
			metav1.SetMetaDataAnnotation(&configMap.ObjectMeta, annotation, strconv.Itoa(i))
			return manager.Update(ctx, configMap)
		}},
	}
	if records {
		// What the audit receiver reads for a batch that may change the
		// record, and the gate for each reconcile while a rotation is
		// Prepared (at the cache's resourceVersion, from the watch cache too).
		usage := client.ObjectKey{Namespace: f.ns, Name: credentials.CertificateUsageConfigMapName(name)}
		kinds = append(kinds, request{"usage record read from the watch cache", func(int) error {
			return manager.Get(ctx, usage, &corev1.ConfigMap{}, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
		}}, request{"usage record read of the latest", func(int) error {
			return manager.Get(ctx, usage, &corev1.ConfigMap{})
		}})
	}
	costs := make([]string, len(kinds))
	for k, kind := range kinds {
		before := apiserver.cpu(b)
		for i := range requests {
			check(b, kind.do(i))
		}
		costs[k] = fmt.Sprintf("%s %.1f ms", kind.kind, float64((apiserver.cpu(b)-before).Microseconds())/1000/requests)
	}
	return strings.Join(costs, ", ")
}

// create creates the Clusters, a few at a time, as a fleet's tooling would.
func (f *fleet) create(b *testing.B, ctx context.Context) {
	f.each(b, func(i int) error {
		return f.k8s.Create(ctx, &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.name(i), Labels: fleetLabels},
			Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"}})
	})
}

// annotate requests an operation on every Cluster.
func (f *fleet) annotate(b *testing.B, ctx context.Context, operation string) {
	f.each(b, func(i int) error {
		c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.name(i)}}
		patch := client.RawPatch("application/merge-patch+json",
			[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.OperationAnnotation, operation)))
		return f.k8s.Patch(ctx, c, patch)
	})
}

// recordCost is what the records of the old-CA usage gate cost the
// manager: the growth of its live heap, the writes it made for them and its
// peak RSS meanwhile; and the size of one record.
type recordCost struct {
	heap    float64
	writes  int
	peakRSS int64
	bytes   int
}

// usageRecords gives every Cluster a record of credentials client
// certificates in use, as the audit receiver writes one (owned by the
// Cluster) for a managed API server that serves as many (a cluster of some
// 100 nodes in a rotation has two per kubelet), and measures what the
// manager's live heap gained once it reconciled every Cluster for its record
// and fell quiet.
func (f *fleet) usageRecords(b *testing.B, ctx context.Context, proc *process, credentialsInUse int) recordCost {
	b.Helper()
	proc.peakRSSSinceLastReading(b)
	before, reconciles, writes := proc.sample(b), proc.reconciles(b), f.writes()
	now := time.Now().UTC()
	var size atomic.Int64
	f.each(b, func(i int) error {
		seen := make([]oldca.Credential, credentialsInUse)
		for j := range seen {
			certificate := sha256.Sum256(fmt.Appendf(nil, "%d/%d", i, j))
			seen[j] = oldca.Credential{User: fmt.Sprintf("system:node:ip-10-0-%d-%d.ec2.internal", j/250, j%250),
				Fingerprint: hex.EncodeToString(certificate[:]), FirstSeen: now, LastSeen: now}
		}
		usage := &oldca.Usage{}
		usage.Observe(seen, now, 0)
		record := usage.String()
		size.Store(int64(len(record)))
		cluster := &v1alpha1.Cluster{}
		if err := f.cache.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.name(i)}, cluster); err != nil {
			return err
		}
		return f.k8s.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: credentials.CertificateUsageConfigMapName(f.name(i)),
				Labels:          map[string]string{v1alpha1.LabelCluster: f.name(i)},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cluster, v1alpha1.SchemeGroupVersion.WithKind("Cluster"))}},
			Data: map[string]string{oldca.DataKey: record},
		})
	})
	// Each record queues its Cluster once (a few may join a wake-up already
	// queued): wait for nearly as many reconciles, and then for the Cluster
	// controller to have nothing queued, nothing running and no reconcile
	// for quiet.
	const quiet = 2 * time.Second
	last, since := -1, time.Now()
	check(b, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		metrics := proc.metrics(b)
		controller := map[string]string{"controller": clustercontroller.ControllerName}
		done := int(sum(metrics["controller_runtime_reconcile_total"], controller))
		if done != last {
			last, since = done, time.Now()
		}
		return done-reconciles >= f.n*9/10 && time.Since(since) >= quiet &&
			sum(metrics["workqueue_depth"], map[string]string{"name": clustercontroller.ControllerName}) == 0 &&
			sum(metrics["controller_runtime_active_workers"], controller) == 0, nil
	}))
	after := proc.sample(b)
	return recordCost{heap: after.heap - before.heap, writes: f.writes() - writes, peakRSS: proc.peakRSSSinceLastReading(b), bytes: int(size.Load())}
}

// each runs do for every Cluster, 16 at a time, and fails on the first error.
func (f *fleet) each(b *testing.B, do func(i int) error) {
	b.Helper()
	var g errgroup.Group
	g.SetLimit(16)
	for i := range f.n {
		g.Go(func() error { return do(i) })
	}
	check(b, g.Wait())
}

// waitFor looks at the cached Clusters until every one satisfies done.
func (f *fleet) waitFor(b *testing.B, ctx context.Context, done func(*v1alpha1.Cluster) bool) {
	b.Helper()
	check(b, f.waitForSome(ctx, f.n, done))
}

// waitForSome waits until at least want Clusters are done.
func (f *fleet) waitForSome(ctx context.Context, want int, done func(*v1alpha1.Cluster) bool) error {
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		// The cache's own objects, not a copy of a thousand Clusters four
		// times a second: the harness shares the CPUs it measures.
		var list v1alpha1.ClusterList
		if err := f.cache.List(ctx, &list, client.InNamespace(f.ns), client.UnsafeDisableDeepCopy); err != nil {
			return false, err
		}
		count := 0
		for i := range list.Items {
			if done(&list.Items[i]) {
				count++
			}
		}
		return count >= want, nil
	})
}

// management is a benchmark's management cluster: one envtest API server
// with Carousel's CRDs, a client of it, and the kubeconfig of the user the
// manager runs as.
type management struct {
	env        *envtest.Environment
	cfg        *rest.Config
	k8s        client.Client
	kubeconfig string
	// rest reads the API server's metrics and profiles.
	rest rest.Interface
}

// load is what the machine had done by a moment: the time its CPUs were
// busy and in all, the CPU time of this process and of its children by
// command name (cpuUse), and the requests the API server had served.
type load struct {
	at          time.Time
	cpus        int
	busy, total int64 // clock ticks of all CPUs
	cpu         map[string]time.Duration
	requests    float64
}

// load reads what the machine has done so far: the API server's requests,
// then the rest together.
func (m *management) load(b *testing.B) load {
	b.Helper()
	l := load{requests: sum(m.metrics(b)["apiserver_request_total"], nil)}
	l.at, l.cpu = time.Now(), cpuUse(b, "")
	var err error
	l.cpus, l.busy, l.total, err = machineCPU()
	check(b, err)
	return l
}

// metrics reads the API server's metrics.
func (m *management) metrics(b *testing.B) map[string]*dto.MetricFamily {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	metrics, err := m.rest.Get().AbsPath("/metrics").Stream(ctx)
	check(b, err)
	defer func() { _ = metrics.Close() }()
	families, err := parseMetrics(metrics)
	check(b, err)
	return families
}

// profile writes the API server's CPU profile of the next window to path.
func (m *management) profile(ctx context.Context, window time.Duration, path string) error {
	profile, err := m.rest.Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(int(window.Seconds()))).
		Timeout(window + time.Minute).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("the API server's CPU profile: %w", err)
	}
	return os.WriteFile(path, profile, 0o600)
}

// since says where the machine's CPU went from before to l, in a step of a
// fleet of n Clusters: how busy its CPUs were, each process's share (in %
// of one CPU), the requests the API server served a second, and its CPU per
// Cluster, with the shortest the step could have taken had the API server
// had every CPU to itself: the bound it sets for any manager that makes the
// same requests.
func (l load) since(before load, n int) string {
	wall, cpus := l.at.Sub(before.at), l.cpus
	names := slices.SortedFunc(maps.Keys(l.cpu), func(a, b string) int { return cmp.Compare(l.cpu[b]-before.cpu[b], l.cpu[a]-before.cpu[a]) })
	shares := make([]string, 0, len(names))
	for _, name := range names {
		shares = append(shares, fmt.Sprintf("%s %.0f", name, 100*(l.cpu[name]-before.cpu[name]).Seconds()/wall.Seconds()))
	}
	api := l.cpu["kube-apiserver"] - before.cpu["kube-apiserver"]
	return fmt.Sprintf("%.1f s, its %d CPUs %.0f%% busy; CPU in %% of one: %s; API server %.0f requests/s, %.1f ms of CPU a Cluster: "+
		"with every CPU its own, at least %.1f s for the step",
		wall.Seconds(), cpus, 100*float64(l.busy-before.busy)/float64(max(1, l.total-before.total)), strings.Join(shares, ", "),
		(l.requests-before.requests)/wall.Seconds(), float64(api.Microseconds())/1000/float64(n), api.Seconds()/float64(cpus))
}

// startManagement starts the management cluster; configure, if not nil,
// sets up its API server before it starts.
func startManagement(b *testing.B, configure func(*envtest.Environment)) *management {
	b.Helper()
	m := &management{env: &envtest.Environment{
		CRDDirectoryPaths: []string{filepath.Join("..", "..", "charts", "carousel", "files", "crds")}, ErrorIfCRDPathMissing: true}}
	if configure != nil {
		configure(m.env)
	}
	check(b, framework.DieWithTestProcess(m.env, os.Getenv("KUBEBUILDER_ASSETS"), b.TempDir()))
	// The manager authenticates with a bearer token, as it does in a cluster
	// (its ServiceAccount's), which costs the API server a lookup (a static
	// token) or a cache hit (a ServiceAccount token's verdict is kept 10 s).
	// A client certificate's chain would be verified again for every
	// request: 3–4 % of the API server's CPU here, which no deployment
	// spends.
	token := rand.Text()
	tokens := filepath.Join(b.TempDir(), "tokens.csv")
	check(b, os.WriteFile(tokens, []byte(token+","+managerUser+","+managerUser+",system:masters\n"), 0o600))
	m.env.ControlPlane.GetAPIServer().Configure().Set("token-auth-file", tokens)
	var err error
	m.cfg, err = m.env.Start()
	check(b, err)
	m.cfg.QPS, m.cfg.Burst = 1000, 1000
	m.k8s, err = client.New(m.cfg, client.Options{Scheme: scheme.New()})
	check(b, err)
	cs, err := kubernetes.NewForConfig(m.cfg)
	check(b, err)
	m.rest = cs.Discovery().RESTClient()
	kubeconfig, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"management": {Server: m.cfg.Host, CertificateAuthorityData: m.cfg.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{managerUser: {Token: token}},
		Contexts:       map[string]*clientcmdapi.Context{managerUser: {Cluster: "management", AuthInfo: managerUser}},
		CurrentContext: managerUser,
	})
	check(b, err)
	m.kubeconfig = filepath.Join(b.TempDir(), "kubeconfig")
	check(b, os.WriteFile(m.kubeconfig, kubeconfig, 0o600))
	return m
}

func (m *management) stop() { _ = m.env.Stop() }

// watchClusters starts a cache of the management cluster's Clusters: the
// harness follows them through one watch, since listing a thousand of them
// over and over would load the API server it measures. stop stops it.
func (m *management) watchClusters(b *testing.B, ctx context.Context) (clusters cache.Cache, stop func()) {
	b.Helper()
	clusters, err := cache.New(m.cfg, cache.Options{Scheme: scheme.New(), ByObject: map[client.Object]cache.ByObject{&v1alpha1.Cluster{}: {}}})
	check(b, err)
	cacheCtx, stop := context.WithCancel(ctx)
	go func() { _ = clusters.Start(cacheCtx) }()
	if !clusters.WaitForCacheSync(ctx) {
		stop()
		b.Fatal("the Clusters' cache did not sync")
	}
	return clusters, stop
}

// controlPlaneAndManager are the test control plane's directory and the
// manager binary a benchmark runs, from KUBEBUILDER_ASSETS and
// CAROUSEL_MANAGER; without them it is skipped, pointing at the make target
// that sets them.
func controlPlaneAndManager(b *testing.B, target string) (assets, manager string) {
	b.Helper()
	assets, manager = os.Getenv("KUBEBUILDER_ASSETS"), os.Getenv("CAROUSEL_MANAGER")
	if assets == "" || manager == "" {
		b.Skip("needs the test control plane and the manager binary: run it through `make " + target + "`")
	}
	return assets, manager
}

// process is a process the benchmark started, by its PID.
type process struct {
	pid int
	cmd *exec.Cmd // nil for one envtest started
	// pprof is the manager's --pprof-bind-address; empty when it serves none.
	pprof string
	// metricsAddress is the manager's --metrics-bind-address, served over HTTP.
	metricsAddress string
}

// childProcess finds the child process of this one named name (its comm).
func childProcess(b *testing.B, name string) *process {
	b.Helper()
	for _, s := range children(b) {
		if s.comm == name {
			return &process{pid: s.pid}
		}
	}
	b.Fatalf("no child process %s", name)
	return nil
}

// startManager starts the manager binary at path, with flags besides the
// benchmark's own; with pprof, it serves its profiles on a loopback port.
func startManager(b *testing.B, path, kubeconfig string, pprof bool, flags ...string) *process {
	b.Helper()
	logs, err := os.Create(filepath.Join(b.TempDir(), "manager.log"))
	check(b, err)
	p := &process{metricsAddress: loopbackAddress(b)}
	args := []string{"--kubeconfig=" + kubeconfig, "--webhook=false", "--metrics-bind-address=" + p.metricsAddress, "--metrics-secure=false",
		"--health-probe-bind-address=0", "--zap-log-level=error"}
	if pprof {
		p.pprof = loopbackAddress(b)
		args = append(args, "--pprof-bind-address="+p.pprof)
	}
	args = append(args, flags...)
	p.cmd = exec.Command(path, append(args, strings.Fields(os.Getenv("FLEET_MANAGER_FLAGS"))...)...)
	p.cmd.Env = append(os.Environ(), strings.Fields(os.Getenv("FLEET_MANAGER_ENV"))...)
	p.cmd.Stdout, p.cmd.Stderr = logs, logs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // a killed benchmark leaves no manager behind
	check(b, p.cmd.Start())
	p.pid = p.cmd.Process.Pid
	// Serving metrics, the manager has started its controllers' sources.
	check(b, wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + p.metricsAddress + "/metrics") //nolint:noctx // bounded by the poll's timeout
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}))
	return p
}

// loopbackAddress is a loopback address nothing listens on now.
func loopbackAddress(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(b, err)
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// metrics reads the manager's metrics endpoint.
func (p *process) metrics(b *testing.B) map[string]*dto.MetricFamily {
	b.Helper()
	resp, err := http.Get("http://" + p.metricsAddress + "/metrics") //nolint:noctx // a loopback read of a few kilobytes
	check(b, err)
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("/metrics: %s", resp.Status)
	}
	families, err := parseMetrics(resp.Body)
	check(b, err)
	return families
}

// parseMetrics parses Prometheus's text format.
func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(r)
}

// sum adds up the samples of a counter or gauge family whose labels include
// every label of match.
func sum(family *dto.MetricFamily, match map[string]string) float64 {
	total := 0.0
	for _, m := range family.GetMetric() {
		found := 0
		for _, l := range m.GetLabel() {
			if v, ok := match[l.GetName()]; ok && v == l.GetValue() {
				found++
			}
		}
		if found == len(match) {
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return total
}

// reconciles is how many Clusters the manager has reconciled so far, read
// from controller-runtime's reconcile counter.
func (p *process) reconciles(b *testing.B) int {
	b.Helper()
	return int(sum(p.metrics(b)["controller_runtime_reconcile_total"], map[string]string{"controller": clustercontroller.ControllerName}))
}

// profile writes the manager's /debug/pprof/<what> to path.
func (p *process) profile(what, path string) error {
	resp, err := http.Get("http://" + p.pprof + "/debug/pprof/" + what) //nolint:noctx // bounded by the profile's own duration
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/debug/pprof/%s: %s", what, resp.Status)
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, resp.Body)
	return errors.Join(err, out.Close())
}

// stop ends the manager this benchmark started, by its PID.
func (p *process) stop() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// cpu is the CPU time, user and system, the process has used so far.
func (p *process) cpu(b *testing.B) time.Duration {
	b.Helper()
	s, err := readProcStat(p.pid)
	check(b, err)
	return s.cpu
}

// peakRSSSinceLastReading is the process's peak resident memory (VmHWM), in
// bytes, since it started or since the last reading: each reading resets the
// peak to the memory resident now (clear_refs 5, see proc(5)).
func (p *process) peakRSSSinceLastReading(b *testing.B) int64 {
	b.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
	check(b, err)
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			check(b, err)
			check(b, os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.pid), []byte("5"), 0))
			return kib << 10
		}
	}
	b.Fatal("no VmHWM in /proc/<pid>/status")
	return 0
}

// managerUser is the user the manager authenticates as.
const managerUser = "carousel-manager"

// auditManagerWrites has the API server of env write an audit event for each
// write request (create, update, patch, delete) of managerUser, and returns
// a function that lists them so far: the manager's writes, told apart from
// the harness's and the API server's own.
func auditManagerWrites(b *testing.B, env *envtest.Environment) func() []write {
	b.Helper()
	dir := b.TempDir()
	policy, log := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	check(b, os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    users: ["`+managerUser+`"]
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: None
`), 0o600))
	// The log is never rotated (by default it is at 100 MB, which a fleet of
	// 1,000 passes during its second rotation), so that counting its lines
	// counts every write.
	env.ControlPlane.GetAPIServer().Configure().Set("audit-policy-file", policy).Set("audit-log-path", log).
		Set("audit-log-maxsize", "1000000")
	return func() []write {
		b.Helper()
		data, err := os.ReadFile(log)
		if os.IsNotExist(err) {
			return nil
		}
		check(b, err)
		var writes []write
		for line := range strings.Lines(string(data)) {
			var event auditv1.Event
			check(b, json.Unmarshal([]byte(line), &event))
			if event.User.Username == managerUser && event.Stage == auditv1.StageResponseComplete {
				w := write{verb: event.Verb}
				if event.ObjectRef != nil {
					w.ref = *event.ObjectRef
				}
				writes = append(writes, w)
			}
		}
		return writes
	}
}

// write is one write request of the manager, as the audit log has it.
type write struct {
	verb string
	ref  auditv1.ObjectReference
}

func (w write) String() string {
	s := fmt.Sprintf("%s %s %s/%s", w.verb, w.ref.Resource, w.ref.Namespace, w.ref.Name)
	if w.ref.Subresource != "" {
		s += "/" + w.ref.Subresource
	}
	return s
}

// eventOf describes the event w wrote: its reason, note and series count;
// nothing when w wrote no event.
func (f *fleet) eventOf(ctx context.Context, w write) string {
	if w.ref.Resource != "events" {
		return ""
	}
	var event eventsv1.Event
	if err := f.k8s.Get(ctx, client.ObjectKey{Namespace: w.ref.Namespace, Name: w.ref.Name}, &event); err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	series := int32(1)
	if event.Series != nil {
		series = event.Series.Count
	}
	return fmt.Sprintf("(%s %q, %d times)", event.Reason, event.Note, series)
}

// envOr is the environment variable name parsed with parse, or def when it
// is not set.
func envOr[T any](b *testing.B, name string, def T, parse func(string) (T, error)) T {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	parsed, err := parse(v)
	check(b, err)
	return parsed
}
