// Package sharding runs Carousel's controller manager as three shards of one
// ControllerRing of kubernetes-controller-sharding's sharder, each a process
// of the manager binary with the chart's permissions, on a real
// kube-apiserver: the sharder assigns the Clusters, a killed shard's Clusters
// (and their kubelets' CSRs) move to the others, a joining shard takes some
// through drains, and no Cluster is written by two shards.
package sharding

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	shardingv1alpha1 "github.com/timebertt/kubernetes-controller-sharding/pkg/apis/sharding/v1alpha1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/nodeagent"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/scheme"
	"github.com/carousel-dev/carousel/test/framework"
)

func TestSharding(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(time.Minute)
	SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	RunSpecs(t, "Sharding Suite")
}

const (
	// releaseNamespace is where the chart would run the shards, and where
	// their Leases are.
	releaseNamespace = "carousel-system"
	ring             = "carousel"
	shards           = 3
	nClusters        = 120
	namespace        = "fleet"
)

var (
	env      *envtest.Environment
	k8s      client.Client
	auditLog string
	workDir  string
)

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	Expect(os.Getenv("CAROUSEL_MANAGER")).NotTo(BeEmpty(), "run the suite with `make test-sharding`, which builds the manager")
	workDir = GinkgoT().TempDir()
	policy := filepath.Join(workDir, "audit-policy.yaml")
	auditLog = filepath.Join(workDir, "audit.log")
	// Every write of a shard to a Cluster, for the ownership and conflict counts.
	Expect(os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    userGroups: ["carousel-shards"]
    verbs: ["create", "update", "patch", "delete"]
    resources: [{group: carousel.dev, resources: ["clusters", "clusters/status"]}]
  - level: None
`), 0o600)).To(Succeed())
	env = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "charts", "carousel", "files", "crds"), filepath.Join(assets, "sharding", "crds")},
		ErrorIfCRDPathMissing: true,
	}
	Expect(framework.DieWithTestProcess(env, assets, workDir)).To(Succeed())
	env.ControlPlane.GetAPIServer().Configure().Set("audit-policy-file", policy).Set("audit-log-path", auditLog)
	DeferCleanup(func() { Expect(env.Stop()).To(Succeed()) }) // before the start, which may fail half-way
	cfg, err := env.Start()
	Expect(err).NotTo(HaveOccurred(), "starting the test control plane; run `make envtest` and set KUBEBUILDER_ASSETS (the Makefile does both)")
	k8s, err = client.New(cfg, client.Options{Scheme: scheme.New()})
	Expect(err).NotTo(HaveOccurred())
	for _, ns := range []string{namespace, releaseNamespace} {
		Expect(k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	applyChartRBAC(context.Background())
})

// chartObjects renders a template of the chart as helm does with sharding
// on, and returns its objects.
func chartObjects(template string) []*unstructured.Unstructured {
	GinkgoHelper()
	helm := os.Getenv("HELM")
	Expect(helm).NotTo(BeEmpty(), "run the suite with `make test-sharding`, which builds helm")
	out, err := exec.Command(helm, "template", "carousel", filepath.Join("..", "..", "charts", "carousel"), "--namespace", releaseNamespace,
		"--set", "sharding.enabled=true", "--set", "leaderElection.enabled=false", "--set", "sharding.controllerRing="+ring,
		"--show-only", template).Output()
	Expect(err).NotTo(HaveOccurred())
	var objs []*unstructured.Unstructured
	for doc := range strings.SplitSeq(string(out), "\n---") {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err == nil && obj.GetKind() != "" {
			objs = append(objs, obj)
		}
	}
	return objs
}

// applyChartRBAC creates the chart's RBAC as helm renders it with sharding
// on, its bindings given to the group of the shards: the shards run with
// exactly the chart's permissions.
func applyChartRBAC(ctx context.Context) {
	GinkgoHelper()
	applied := 0
	for _, obj := range chartObjects("templates/rbac.yaml") {
		if strings.HasSuffix(obj.GetKind(), "Binding") {
			obj.Object["subjects"] = []any{map[string]any{"kind": "Group", "name": "carousel-shards", "apiGroup": "rbac.authorization.k8s.io"}}
		}
		Expect(k8s.Create(ctx, obj)).To(Succeed(), "%s %s", obj.GetKind(), obj.GetName())
		applied++
	}
	Expect(applied).To(BeNumerically(">=", 4), "the chart's manager ClusterRole and Lease Role, and their bindings")
}

// kubeconfigOf writes the kubeconfig of a user in groups.
func kubeconfigOf(name string, groups ...string) string {
	GinkgoHelper()
	user, err := env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	Expect(err).NotTo(HaveOccurred())
	data, err := user.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(workDir, name+".kubeconfig")
	Expect(os.WriteFile(path, data, 0o600)).To(Succeed())
	return path
}

// start runs binary with args until the suite ends; it dies with the test
// process, and is stopped by its PID.
func start(name, binary string, args ...string) *exec.Cmd {
	GinkgoHelper()
	logs, err := os.Create(filepath.Join(workDir, name+".log"))
	Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	Expect(cmd.Start()).To(Succeed())
	DeferCleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
		_ = logs.Close()
	})
	return cmd
}

// startSharder runs the sharder with its webhook on a loopback port, which
// the webhook configurations it writes point at.
func startSharder() {
	GinkgoHelper()
	webhook := envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"}
	Expect(webhook.PrepWithoutInstalling()).To(Succeed())
	DeferCleanup(func() { _ = os.RemoveAll(webhook.LocalServingCertDir) })
	ca := filepath.Join(workDir, "sharder-ca.crt")
	Expect(os.WriteFile(ca, webhook.LocalServingCAData, 0o600)).To(Succeed())
	start("sharder", filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "sharder"), "--kubeconfig="+kubeconfigOf("sharder", "system:masters"),
		"--webhook-host=127.0.0.1", fmt.Sprintf("--webhook-port=%d", webhook.LocalServingPort), "--webhook-cert-dir="+webhook.LocalServingCertDir,
		fmt.Sprintf("--webhook-url=https://127.0.0.1:%d", webhook.LocalServingPort), "--webhook-ca-file="+ca)
}

// shard is a manager process running as one shard of the ring.
type shard struct {
	cmd     *exec.Cmd
	metrics string // its metrics endpoint, plain HTTP on loopback
}

// startShard runs the manager binary as shard name of the ring.
func startShard(name string) *shard {
	GinkgoHelper()
	port, err := framework.FreePort()
	Expect(err).NotTo(HaveOccurred())
	s := &shard{metrics: fmt.Sprintf("127.0.0.1:%d", port)}
	s.cmd = start(name, os.Getenv("CAROUSEL_MANAGER"), "--kubeconfig="+kubeconfigOf(name, "carousel-shards"),
		"--shard-controller-ring="+ring, "--shard-name="+name, "--shard-lease-namespace="+releaseNamespace, "--webhook=false",
		"--metrics-bind-address="+s.metrics, "--metrics-secure=false", "--health-probe-bind-address=0")
	return s
}

// signed is how many kubelet client CSRs of cluster the shard signed; 0
// when it has no such series.
func (s *shard) signed(g Gomega, cluster string) float64 {
	resp, err := http.Get("http://" + s.metrics + "/metrics") //nolint:noctx // a loopback read
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	total := 0.0
	for _, m := range families["carousel_csr_signed_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "cluster" && l.GetValue() == cluster {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// bootstrapKubelet has a kubelet of node create its client CSR in the
// managed cluster of c with the bootstrap kubeconfig Carousel published, and
// waits for the certificate.
func bootstrapKubelet(ctx context.Context, c *v1alpha1.Cluster, node string) {
	GinkgoHelper()
	secret := &corev1.Secret{}
	Eventually(func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.BootstrapKubeconfigSecretName(c.Name)}, secret)
	}).Should(Succeed())
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[v1alpha1.DataKeyKubeconfig])
	Expect(err).NotTo(HaveOccurred())
	key, err := pki.GenerateKey(pki.ECDSAP256)
	Expect(err).NotTo(HaveOccurred())
	csr, err := nodeagent.ClientCSR(node, node, key, 0)
	Expect(err).NotTo(HaveOccurred())
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, err = nodeagent.RequestCertificate(waitCtx, kubernetes.NewForConfigOrDie(cfg), csr, key)
	Expect(err).NotTo(HaveOccurred())
}

// readyShards are the shards the sharder counts as ready.
func readyShards(ctx context.Context) []string {
	var leases coordinationv1.LeaseList
	Expect(k8s.List(ctx, &leases, client.InNamespace(releaseNamespace), client.MatchingLabels{shardingv1alpha1.LabelControllerRing: ring})).To(Succeed())
	var ready []string
	for _, l := range leases.Items {
		if l.Labels[shardingv1alpha1.LabelState] == "ready" {
			ready = append(ready, l.Name)
		}
	}
	slices.Sort(ready)
	return ready
}

// owners maps each Cluster to the shard its label names.
func owners(ctx context.Context) map[string]string {
	var list v1alpha1.ClusterList
	Expect(k8s.List(ctx, &list, client.InNamespace(namespace))).To(Succeed())
	out := map[string]string{}
	for _, c := range list.Items {
		out[c.Name] = c.Labels[shardingv1alpha1.LabelShard(ring)]
	}
	return out
}

// clusterWrite is one write of a shard to a Cluster, from the audit log.
type clusterWrite struct {
	shard, cluster string
	at             time.Time
	code           int32
}

func clusterWrites() []clusterWrite {
	GinkgoHelper()
	data, err := os.ReadFile(auditLog)
	Expect(err).NotTo(HaveOccurred())
	var writes []clusterWrite
	for line := range strings.Lines(string(data)) {
		var event auditv1.Event
		Expect(json.Unmarshal([]byte(line), &event)).To(Succeed())
		if event.Stage != auditv1.StageResponseComplete || event.ObjectRef == nil || event.ObjectRef.Namespace != namespace {
			continue
		}
		w := clusterWrite{shard: event.User.Username, cluster: event.ObjectRef.Name, at: event.RequestReceivedTimestamp.Time}
		if event.ResponseStatus != nil {
			w.code = event.ResponseStatus.Code
		}
		writes = append(writes, w)
	}
	return writes
}

var _ = Describe("Three shards", func() {
	It("split the Clusters, pick up a killed shard's Clusters, never write one Cluster from two shards, and run a campaign across all", func(ctx SpecContext) {
		startSharder()
		// The chart's ControllerRing, as helm renders it.
		rings := 0
		for _, obj := range chartObjects("templates/controllerring.yaml") {
			if obj.GetKind() == "ControllerRing" {
				Expect(obj.GetName()).To(Equal(ring))
				Expect(k8s.Create(ctx, obj)).To(Succeed())
				rings++
			}
		}
		Expect(rings).To(Equal(1), "the chart renders one ControllerRing")
		procs := map[string]*shard{}
		var names []string
		for i := range shards {
			name := fmt.Sprintf("shard-%d", i)
			names = append(names, name)
			procs[name] = startShard(name)
		}
		Eventually(func() []string { return readyShards(ctx) }).Should(Equal(names), "every shard holds its Lease")

		By(fmt.Sprintf("%d Clusters, each assigned to one shard and issued by it", nClusters))
		for i := range nClusters {
			Expect(k8s.Create(ctx, &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("c-%03d", i),
				Labels: map[string]string{"fleet": "all"}}, Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"}})).To(Succeed())
		}
		Eventually(func(g Gomega) {
			var list v1alpha1.ClusterList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(namespace))).To(Succeed())
			for _, c := range list.Items {
				g.Expect(meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue(), c.Name)
			}
		}).WithTimeout(3 * time.Minute).Should(Succeed())
		By("a Cluster in kube-system, which the sharder leaves out unless the ring selects it, is assigned and issued too")
		system := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "system"},
			Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"}}
		Expect(k8s.Create(ctx, system)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(system), system)).To(Succeed())
			g.Expect(system.Labels).To(HaveKeyWithValue(shardingv1alpha1.LabelShard(ring), BeElementOf(names)))
			g.Expect(meta.IsStatusConditionTrue(system.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
		}).WithTimeout(time.Minute).Should(Succeed())
		By("a Cluster with a real managed API server: its kubelet CSRs are signed by its shard alone")
		plane := &framework.ManagedControlPlane{BinDir: os.Getenv("KUBEBUILDER_ASSETS"), Dir: filepath.Join(workDir, "plane")}
		Expect(plane.ReservePorts()).To(Succeed())
		DeferCleanup(plane.Stop)
		managed := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "managed"},
			Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3", ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: plane.Endpoint()}}}
		Expect(k8s.Create(ctx, managed)).To(Succeed())
		Eventually(func() error { return plane.WriteCredentials(ctx, k8s, managed) }).Should(Succeed(), "Carousel issues the plane's credentials")
		Expect(plane.Start(ctx)).To(Succeed())
		bootstrapKubelet(ctx, managed, "node-before")
		before := owners(ctx)
		expectSignedOnlyBy := func(owner string, want float64) {
			GinkgoHelper()
			// A shard counts a CSR once the certificate is written, which is
			// when the kubelet may already have it: its count is waited for.
			Eventually(func(g Gomega) {
				g.Expect(procs[owner].signed(g, managed.Name)).To(Equal(want), "CSRs of %s signed by its shard %s", managed.Name, owner)
			}).Should(Succeed())
			for name, s := range procs {
				if s.cmd.ProcessState == nil && name != owner { // not killed
					Expect(s.signed(Default, managed.Name)).To(BeZero(), "CSRs of %s signed by %s, which does not own it", managed.Name, name)
				}
			}
		}
		expectSignedOnlyBy(before[managed.Name], 1)
		perShard := map[string][]string{}
		for cluster, shard := range before {
			perShard[shard] = append(perShard[shard], cluster)
		}
		for _, name := range names {
			Expect(perShard[name]).NotTo(BeEmpty(), "the sharder gives every shard some Clusters: %v", perShard)
		}
		Expect(perShard).To(HaveLen(shards), "and no Cluster is unassigned")

		By("the managed Cluster's shard killed: its Clusters move to the others, which reconcile them")
		victim := before[managed.Name]
		survivors := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == victim })
		Expect(procs[victim].cmd.Process.Kill()).To(Succeed())
		_ = procs[victim].cmd.Wait()
		killed := time.Now()
		for _, name := range perShard[victim] {
			c := &v1alpha1.Cluster{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, c)).To(Succeed())
			patch := client.MergeFrom(c.DeepCopy())
			c.Annotations = map[string]string{v1alpha1.OperationAnnotation: v1alpha1.OperationReconcile}
			Expect(k8s.Patch(ctx, c, patch)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			now := owners(ctx)
			for _, name := range perShard[victim] {
				g.Expect(now[name]).To(BeElementOf(survivors), name)
				c := &v1alpha1.Cluster{}
				g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, c)).To(Succeed())
				g.Expect(c.Annotations).NotTo(HaveKey(v1alpha1.OperationAnnotation), "%s not reconciled by its new shard yet", name)
			}
		}).WithTimeout(2 * time.Minute).Should(Succeed())
		pickedUp := time.Since(killed)
		after := owners(ctx)
		bootstrapKubelet(ctx, managed, "node-after")
		expectSignedOnlyBy(after[managed.Name], 1)

		By("a campaign, assigned to one shard, rotates the Clusters of both")
		// From here the campaign's shard also writes the other shards' Clusters, as a user would: it sets their operation annotation.
		campaignCreated := time.Now()
		rc := &v1alpha1.RotationCampaign{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "all"},
			Spec: v1alpha1.RotationCampaignSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "all"}},
				MaxConcurrent: ptr.To(intstr.FromString("50%"))}}
		Expect(k8s.Create(ctx, rc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(rc), rc)).To(Succeed())
			g.Expect(rc.Status.Phase).To(Equal(v1alpha1.CampaignPrepared), "%+v", rc.Status.Clusters)
		}).WithTimeout(3 * time.Minute).Should(Succeed())
		Expect(rc.Labels[shardingv1alpha1.LabelShard(ring)]).To(BeElementOf(survivors))
		Expect(rc.Status.Clusters).To(Equal(v1alpha1.CampaignClusterCounts{Selected: nClusters, Done: nClusters}))

		By("shard-3 joins: the sharder drains some Clusters from the others, which hand them over, and shard-3 reconciles them")
		joined := time.Now()
		procs["shard-3"] = startShard("shard-3")
		Eventually(func() []string { return readyShards(ctx) }).Should(Equal(append(slices.Clone(survivors), "shard-3")))
		Eventually(func() []string { return slices.Collect(maps.Values(owners(ctx))) }).WithTimeout(2 * time.Minute).Should(ContainElement("shard-3"))
		var list v1alpha1.ClusterList
		Expect(k8s.List(ctx, &list, client.InNamespace(namespace))).To(Succeed())
		for i := range list.Items {
			c := &list.Items[i]
			patch := client.MergeFrom(c.DeepCopy())
			c.Annotations = map[string]string{v1alpha1.OperationAnnotation: v1alpha1.OperationReconcile}
			Expect(k8s.Patch(ctx, c, patch)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			var list v1alpha1.ClusterList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(namespace))).To(Succeed())
			for _, c := range list.Items {
				g.Expect(c.Labels).To(HaveKey(shardingv1alpha1.LabelShard(ring)), c.Name)
				g.Expect(c.Annotations).NotTo(HaveKey(v1alpha1.OperationAnnotation), "%s not reconciled yet", c.Name)
			}
		}).WithTimeout(2 * time.Minute).Should(Succeed())
		rebalanced := owners(ctx)

		By("the audit log: until the campaign, every write to a Cluster came from the shard it was assigned to; " +
			"after shard-3 joined, a Cluster's writers changed at most once, to its new shard")
		writes := clusterWrites()
		writers := map[string][]string{}
		// 409 Conflicts by stage: before the campaign, during it, after shard-3 joined.
		var conflicts [3]int
		for _, w := range writes {
			if w.code == 409 {
				conflicts[stage(w.at, campaignCreated, joined)]++
			}
			if w.at.After(joined) {
				if runs := writers[w.cluster]; len(runs) == 0 || runs[len(runs)-1] != w.shard {
					writers[w.cluster] = append(runs, w.shard)
				}
				continue
			}
			if w.at.After(campaignCreated) {
				continue
			}
			owner := before[w.cluster]
			if w.at.After(killed) {
				owner = after[w.cluster]
			}
			Expect(w.shard).To(Equal(owner), "cluster %s written by %s at %s, assigned to %s", w.cluster, w.shard, w.at, owner)
		}
		Expect(writes).NotTo(BeEmpty())
		moved := 0
		for cluster, runs := range writers {
			Expect(len(runs)).To(BeNumerically("<=", 2), "cluster %s written by %v in turn", cluster, runs)
			Expect(runs[len(runs)-1]).To(Equal(rebalanced[cluster]), "cluster %s written last by %v, assigned to %s", cluster, runs, rebalanced[cluster])
			if len(runs) == 2 {
				moved++
			}
		}
		By("no shard was refused a request: the chart's permissions are enough")
		for name := range procs {
			log, err := os.ReadFile(filepath.Join(workDir, name+".log"))
			Expect(err).NotTo(HaveOccurred())
			Expect(string(log)).NotTo(ContainSubstring("forbidden"), "%s was refused a request", name)
		}
		AddReportEntry("sharding", fmt.Sprintf("%d Clusters on %d shards %v; killed %s's %d Clusters (the managed one among them) picked up and reconciled %s after the kill; "+
			"a campaign of all %d on %s; shard-3 joined and took %d of them (%d written first by their old shard, acknowledging the drain); %d writes to Clusters by shards; "+
			"409 conflicts before the campaign %d, during it %d, after shard-3 joined %d",
			nClusters+1, shards, counts(perShard), victim, len(perShard[victim]), pickedUp.Round(100*time.Millisecond),
			nClusters, rc.Labels[shardingv1alpha1.LabelShard(ring)], countOf(rebalanced, "shard-3"), moved, len(writes), conflicts[0], conflicts[1], conflicts[2]))
	})
})

// stage is 0 before t1, 1 from t1 to t2, 2 after t2.
func stage(at, t1, t2 time.Time) int {
	switch {
	case at.After(t2):
		return 2
	case at.After(t1):
		return 1
	}
	return 0
}

func countOf(owners map[string]string, shard string) int {
	n := 0
	for _, s := range owners {
		if s == shard {
			n++
		}
	}
	return n
}

func counts(perShard map[string][]string) map[string]int {
	out := map[string]int{}
	for shard, clusters := range perShard {
		out[shard] = len(clusters)
	}
	return out
}
