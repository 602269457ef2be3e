package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationv1helper "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// Options configure a local environment.
type Options struct {
	// RepoRoot is the repository's root (CRDs, webhook manifests).
	RepoRoot string
	// KubeBinDir holds etcd, kube-apiserver, kube-controller-manager (bin/k8s).
	KubeBinDir string
	// CarouselBinDir holds carousel-controller-manager and carousel-node-agent (bin).
	CarouselBinDir string
	// WorkDir receives kubeconfigs, credentials, data and every process's log.
	WorkDir string
	// Namespace and Name of the Cluster; Pool is its one InPlace worker pool.
	Namespace, Name, Pool string
	// Nodes is how many nodes join the managed cluster: real kubelets in a
	// network namespace of the environment's, or, with StandInNodes, node
	// agents that register a Node themselves.
	Nodes int
	// StandInNodes runs each node as a node agent in its stand-in mode
	// (--register-node: it bootstraps, registers a Node and renews its Lease
	// itself) on loopback, with no kubelet and no network namespace.
	StandInNodes bool
	// WorkloadTrustReload is the Cluster's spec.caRotation.workloadTrustReload;
	// nil leaves the default.
	WorkloadTrustReload *metav1.Duration
	// OperatorFlags are added to the controller manager's flags (when
	// Install is nil).
	OperatorFlags []string
	// Logf reports progress.
	Logf func(format string, args ...any)
	// Install, when set, installs Carousel into the management cluster, as
	// `helm install` does, and says how to run the controller manager. When
	// nil, the CRD and webhook configuration come straight from
	// charts/carousel/files and the manager runs as a cluster admin.
	Install func(ctx context.Context, e *Environment) (OperatorRun, error)
}

// OperatorRun is how the controller manager process runs.
type OperatorRun struct {
	// Args are its flags, --kubeconfig included. The environment replaces
	// --webhook-port with a fresh port on each start, and binds
	// --metrics-bind-address and --health-probe-bind-address to ports of the
	// process's choosing.
	Args []string
	// WebhookAddress is the host:port its webhook listens on. On each start,
	// the environment moves it, and every webhook whose URL calls it on
	// loopback, to the fresh port.
	WebhookAddress string
}

// Environment is the local environment of `make run` and the e2e suites: a
// management API server with Carousel's CRD and webhook, the Carousel
// controller manager running as its binary, a managed cluster whose etcd,
// kube-apiserver and kube-controller-manager run on the certificates Carousel
// issued, and its nodes: real kubelets that bootstrapped through Carousel,
// all of it in a network namespace of its own (see Netns), or stand-in node
// agents on loopback (Options.StandInNodes).
type Environment struct {
	Options
	Management *envtest.Environment
	Client     client.Client // the management cluster
	// ManagementKubeconfig is an admin kubeconfig of the management cluster.
	ManagementKubeconfig string
	Cluster              *v1alpha1.Cluster
	ControlPlane         *ManagedControlPlane
	Platform             *Platform
	// Netns holds the managed cluster and its kubelets (nil with StandInNodes).
	Netns *Netns
	// Kubelets are the nodes (empty with StandInNodes).
	Kubelets []*KubeletNode
	// Agents are the node agents: one per kubelet, or the stand-in nodes.
	Agents []*Agent
	// ClusterAPI runs once StartClusterAPI was called.
	ClusterAPI *ClusterAPI

	operator    *process
	operatorRun OperatorRun
	// webhookAddress is operatorRun.WebhookAddress, for the forwarder of
	// the audit webhook, which reads it while the operator restarts.
	webhookAddress atomic.Pointer[string]
	// auditWebhook: the managed API server sends its audit events to the
	// manager (binary runs with a network namespace; see auditWebhookURL).
	auditWebhook bool
	// operatorMetrics is where the running operator serves its metrics.
	operatorMetrics string
	stopPlatform    context.CancelFunc
	// ports holds the management etcd's and API server's ports; logs are
	// their log files.
	ports portSet
	logs  []*os.File
}

// How many API server replicas and etcd members the managed cluster runs with
// real kubelets (see ManagedControlPlane).
const (
	apiServerReplicas = 2
	etcdMembers       = 3
)

// Agent is a node agent process.
type Agent struct {
	Name, Dir string
	process   *process
}

// LogPath is where the agent writes its log.
func (a *Agent) LogPath() string { return filepath.Join(a.Dir, "carousel-node-agent.log") }

func (e *Environment) logf(format string, args ...any) {
	if e.Logf != nil {
		e.Logf(format, args...)
	}
}

// Start brings the whole environment up. On error, call Stop.
func Start(ctx context.Context, opts Options) (*Environment, error) {
	// Absolute: a node's processes run in a mount namespace whose working
	// directory is /, and are handed paths under it.
	workDir, err := filepath.Abs(opts.WorkDir)
	if err != nil {
		return &Environment{Options: opts}, err
	}
	opts.WorkDir = workDir
	e := &Environment{Options: opts}
	if err := os.MkdirAll(opts.WorkDir, 0o700); err != nil {
		return e, err
	}
	e.logf("starting the management API server (etcd + kube-apiserver)")
	e.Management = &envtest.Environment{BinaryAssetsDirectory: opts.KubeBinDir}
	if err := e.configureManagement(); err != nil {
		return e, err
	}
	if opts.Install == nil {
		e.Management.CRDDirectoryPaths = []string{filepath.Join(opts.RepoRoot, "charts", "carousel", "files", "crds")}
		e.Management.ErrorIfCRDPathMissing = true
		e.Management.WebhookInstallOptions = envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join(opts.RepoRoot, "charts", "carousel", "files", "webhook")}, LocalServingHost: "127.0.0.1",
		}
	}
	cfg, err := e.Management.Start()
	if err != nil {
		return e, fmt.Errorf("starting the management API server: %w%s", err, e.managementLogTails())
	}
	if e.Client, err = client.New(cfg, client.Options{Scheme: scheme.New()}); err != nil {
		return e, err
	}
	admin, err := e.Management.AddUser(envtest.User{Name: "carousel-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return e, err
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return e, err
	}
	e.ManagementKubeconfig = filepath.Join(opts.WorkDir, "management.kubeconfig")
	if err := os.WriteFile(e.ManagementKubeconfig, kubeconfig, 0o600); err != nil {
		return e, err
	}
	if opts.Install != nil {
		e.logf("installing Carousel into the management cluster")
		if e.operatorRun, err = opts.Install(ctx, e); err != nil {
			return e, fmt.Errorf("installing Carousel: %w", err)
		}
	}

	e.auditWebhook = opts.Install == nil && !opts.StandInNodes
	if err := e.StartOperator(ctx); err != nil {
		return e, err
	}
	if !opts.StandInNodes {
		addresses := APIServerIPs(apiServerReplicas)
		for i := range opts.Nodes {
			addresses = append(addresses, NodeIP(i+1))
		}
		e.logf("creating the managed cluster's network namespace (%s)", strings.Join(addresses, ", "))
		if e.Netns, err = NewNetns(ctx, opts.WorkDir, addresses...); err != nil {
			return e, err
		}
		if e.auditWebhook {
			ln, err := e.Netns.Listen("tcp", auditWebhookAddress)
			if err != nil {
				return e, err
			}
			e.Netns.ForwardOut(ln, func() string { return *e.webhookAddress.Load() })
		}
	}
	if err := e.startManagedCluster(ctx); err != nil {
		return e, err
	}
	for i := range opts.Nodes {
		name := fmt.Sprintf("%s-node-%d", opts.Name, i+1)
		if opts.StandInNodes {
			err = e.startAgent(ctx, name)
		} else {
			err = e.startKubeletNode(ctx, name, NodeIP(i+1))
		}
		if err != nil {
			return e, err
		}
	}
	if err := e.waitForNodes(ctx); err != nil {
		return e, err
	}
	return e, e.waitForMetricsAPI(ctx)
}

// waitForMetricsAPI waits, when metrics-server runs, until the aggregator
// reports its APIService Available: Carousel wrote the metrics-server CA
// bundle into its caBundle and the API server reached it.
func (e *Environment) waitForMetricsAPI(ctx context.Context) error {
	if !e.ControlPlane.MetricsServer {
		return nil
	}
	e.logf("waiting for Carousel to write APIService %s's caBundle and the aggregator to reach metrics-server", MetricsAPIService)
	managed, err := e.Platform.managedAdmin(ctx)
	if err != nil {
		return err
	}
	// Within two of Carousel's default --apiservice-resync.
	return await(ctx, "APIService "+MetricsAPIService+" to be Available", 500*time.Millisecond, 2*time.Minute, func(ctx context.Context) (bool, error) {
		s := &apiregistrationv1.APIService{}
		if err := managed.Get(ctx, client.ObjectKey{Name: MetricsAPIService}, s); err != nil {
			return false, nil
		}
		return apiregistrationv1helper.IsAPIServiceConditionTrue(s, apiregistrationv1.Available), nil
	}, e.operator, e.ControlPlane.metricsServer)
}

// configureManagement has the management etcd and API server bind ports the
// environment holds (see portSet) and log into WorkDir.
func (e *Environment) configureManagement() error {
	var ports [3]int
	for i := range ports {
		var err error
		if ports[i], err = e.ports.hold(0); err != nil {
			return err
		}
	}
	etcdLog, err := e.createLog("management-etcd.log")
	if err != nil {
		return err
	}
	apiServerLog, err := e.createLog("management-kube-apiserver.log")
	if err != nil {
		return err
	}
	etcd := &envtest.Etcd{URL: &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(ports[0])}, Out: etcdLog, Err: etcdLog}
	etcd.Configure().Set("listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(ports[1])).Enable("socket-reuse-port")
	e.Management.ControlPlane.Etcd = etcd
	if err := DieWithTestProcess(e.Management, e.KubeBinDir, e.WorkDir); err != nil {
		return err
	}
	apiServer := e.Management.ControlPlane.GetAPIServer()
	apiServer.Address, apiServer.Port = "127.0.0.1", strconv.Itoa(ports[2]) // of SecureServing
	// As OpenShift's: an object that blocks its owner's deletion may only
	// be written by who may update the owner's finalizers.
	apiServer.Configure().Enable("permit-port-sharing").Append("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
	apiServer.Out, apiServer.Err = apiServerLog, apiServerLog
	return nil
}

// createLog creates a log file in WorkDir, closed by Stop.
func (e *Environment) createLog(name string) (*os.File, error) {
	f, err := os.Create(filepath.Join(e.WorkDir, name))
	if err == nil {
		e.logs = append(e.logs, f)
	}
	return f, err
}

// managementLogTails returns the last lines of the management etcd's and API
// server's logs, for an error.
func (e *Environment) managementLogTails() string {
	var b strings.Builder
	for _, f := range e.logs {
		if out := readLog(f.Name(), 0); len(out) > 0 {
			fmt.Fprintf(&b, "; last lines of %s:\n    %s", f.Name(), strings.Join(lastLines(out), "\n    "))
		}
	}
	return b.String()
}

// StartOperator starts the carousel-controller-manager binary and waits until
// the API server calls its webhook. Its webhook listens on a fresh port, and
// it starts again on another one if that port is taken before it binds it.
func (e *Environment) StartOperator(ctx context.Context) error {
	if e.operatorRun.Args == nil {
		w := e.Management.WebhookInstallOptions
		e.operatorRun.WebhookAddress = net.JoinHostPort(w.LocalServingHost, strconv.Itoa(w.LocalServingPort))
		e.operatorRun.Args = []string{
			"--kubeconfig=" + e.ManagementKubeconfig,
			"--webhook-host=" + w.LocalServingHost, "--webhook-cert-dir=" + w.LocalServingCertDir,
			"--managed-poll-interval=1s", "--apiservice-resync=2s",
		}
		if e.auditWebhook {
			ca := filepath.Join(e.WorkDir, "webhook-ca.crt")
			if err := os.WriteFile(ca, w.LocalServingCAData, 0o600); err != nil {
				return err
			}
			e.operatorRun.Args = append(e.operatorRun.Args, "--audit-webhook-url="+auditWebhookURL, "--audit-webhook-ca-file="+ca)
		}
		e.operatorRun.Args = append(e.operatorRun.Args, e.OperatorFlags...)
	}
	const name = "carousel-controller-manager"
	var err error
	e.operator, err = startChild(ctx, child{
		name: name, binary: filepath.Join(e.CarouselBinDir, name), logPath: filepath.Join(e.WorkDir, name+".log"),
		ports: 2, args: e.operatorArgs, ready: e.operatorServes, timeout: time.Minute,
	})
	return err
}

// operatorArgs moves the webhook to ports[0], the metrics to ports[1], and
// returns the operator's flags for them.
func (e *Environment) operatorArgs(ctx context.Context, ports []int) ([]string, error) {
	host, old, err := net.SplitHostPort(e.operatorRun.WebhookAddress)
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(ports[0])
	if err := e.moveWebhooks(ctx, old, port); err != nil {
		return nil, err
	}
	address := net.JoinHostPort(host, port)
	e.operatorRun.WebhookAddress = address
	e.webhookAddress.Store(&address)
	e.operatorMetrics = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	return withFlags(e.operatorRun.Args,
		"--webhook-port="+port, "--metrics-bind-address="+e.operatorMetrics, "--health-probe-bind-address=127.0.0.1:0"), nil
}

// auditWebhookAddress is where, inside the network namespace, the managed
// API servers reach the manager's webhook server (forwarded out to it), and
// auditWebhookURL the audit receiver there. The webhook's serving
// certificate is valid for 127.0.0.1.
const (
	auditWebhookAddress = "127.0.0.1:9444"
	auditWebhookURL     = "https://" + auditWebhookAddress + "/audit"
)

// OperatorMetricsAddress is the host:port the running operator serves its
// metrics on.
func (e *Environment) OperatorMetricsAddress() string { return e.operatorMetrics }

// moveWebhooks makes every validating webhook that calls port from on
// loopback call port to instead. (Carousel has no mutating webhook.)
func (e *Environment) moveWebhooks(ctx context.Context, from, to string) error {
	list := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	if err := e.Client.List(ctx, list); err != nil {
		return err
	}
	for i := range list.Items {
		moved := false
		for j := range list.Items[i].Webhooks {
			cc := &list.Items[i].Webhooks[j].ClientConfig
			if cc.URL == nil {
				continue
			}
			u, err := url.Parse(*cc.URL)
			if err != nil || u.Port() != from || (u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost") {
				continue
			}
			u.Host = net.JoinHostPort(u.Hostname(), to)
			cc.URL, moved = ptr.To(u.String()), true
		}
		if moved {
			if err := e.Client.Update(ctx, &list.Items[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// withFlags returns args with flags ("--name=value") in place of the
// arguments that set the same flags.
func withFlags(args []string, flags ...string) []string {
	out := slices.DeleteFunc(slices.Clone(args), func(a string) bool {
		return slices.ContainsFunc(flags, func(f string) bool {
			name, _, _ := strings.Cut(f, "=")
			return a == name || strings.HasPrefix(a, name+"=")
		})
	})
	return append(out, flags...)
}

// operatorServes reports whether the webhook serves TLS and the API server
// calls it.
func (e *Environment) operatorServes(ctx context.Context) (bool, error) {
	conn, err := (&tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}}).DialContext(ctx, "tcp", e.operatorRun.WebhookAddress) //nolint:gosec // only checks that it serves
	if err != nil {
		return false, nil
	}
	_ = conn.Close()
	return e.apiServerCallsWebhook(ctx), nil
}

// apiServerCallsWebhook reports whether the API server reaches the webhook and
// trusts its certificate: the webhook, and only the webhook, refuses a
// dry-run Cluster with an unknown operation.
func (e *Environment) apiServerCallsWebhook(ctx context.Context) bool {
	probe := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "webhook-probe", Annotations: map[string]string{v1alpha1.OperationAnnotation: "webhook-probe"}},
		Spec:       v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"},
	}
	err := e.Client.Create(ctx, probe, client.DryRunAll)
	return err != nil && strings.Contains(err.Error(), "denied the request")
}

// KillOperator kills the controller manager with SIGKILL, as a crash would.
func (e *Environment) KillOperator() {
	_ = e.operator.cmd.Process.Signal(syscall.SIGKILL)
	<-e.operator.done
}

func (e *Environment) startManagedCluster(ctx context.Context) error {
	e.ControlPlane = &ManagedControlPlane{BinDir: e.KubeBinDir, Dir: filepath.Join(e.WorkDir, "managed"), ControllerManager: true,
		MetricsServer: e.Netns != nil, Tunnel: e.Netns != nil, AuditWebhook: e.auditWebhook, EtcdMembers: etcdMembers, APIServerReplicas: apiServerReplicas, Netns: e.Netns}
	if err := e.ControlPlane.ReservePorts(); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.Namespace}}
	if err := e.Client.Create(ctx, ns); err != nil {
		return err
	}
	e.Cluster = &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name},
		Spec: v1alpha1.ClusterSpec{
			KubernetesVersion: "1.36.3",
			ControlPlane:      v1alpha1.ControlPlaneSpec{Endpoint: e.ControlPlane.Endpoint()},
			Workers:           []v1alpha1.WorkerPool{{Name: e.Pool, RolloutStrategy: v1alpha1.RolloutInPlace}},
			CARotation:        v1alpha1.CARotationSettings{WorkloadTrustReload: e.WorkloadTrustReload},
		},
	}
	if !e.StandInNodes {
		// Kubelets ask for serving certificates; Carousel approves them under
		// the stricter address policy.
		e.Cluster.Spec.KubeletBootstrap.CSRApproval = v1alpha1.CSRApprovalPolicy{
			Client: v1alpha1.ApprovalAuto, Serving: v1alpha1.ApprovalAuto, ServingAddresses: v1alpha1.ServingAddressesFirstSeen,
		}
	}
	e.logf("creating Cluster %s/%s", e.Namespace, e.Name)
	if err := e.Client.Create(ctx, e.Cluster); err != nil {
		return err
	}
	e.logf("waiting for Carousel to issue the credentials, then starting the managed etcd, kube-apiserver and kube-controller-manager on them")
	if err := await(ctx, "Carousel to issue the credentials", 200*time.Millisecond, time.Minute, func(ctx context.Context) (bool, error) {
		return e.ControlPlane.WriteCredentials(ctx, e.Client, e.Cluster) == nil, nil
	}, e.operator); err != nil {
		return err
	}
	if err := e.ControlPlane.Start(ctx); err != nil {
		return err
	}
	e.Platform = &Platform{Client: e.Client, Cluster: e.Cluster, ControlPlane: e.ControlPlane, Logf: e.Logf}
	if e.ControlPlane.Tunnel {
		e.logf("starting the konnectivity agents: the API server reaches the nodes and metrics-server through them")
		if err := e.ControlPlane.StartTunnelAgents(ctx); err != nil {
			return err
		}
	}
	if e.ControlPlane.MetricsServer {
		e.logf("starting metrics-server, the aggregated API server, and registering it as APIService %s", MetricsAPIService)
		managed, err := e.Platform.managedAdmin(ctx)
		if err != nil {
			return err
		}
		if err := InstallMetricsServer(ctx, managed); err != nil {
			return err
		}
		if err := e.ControlPlane.StartMetricsServer(ctx, managed); err != nil {
			return err
		}
	}
	if err := e.Platform.CreateWorkloads(ctx); err != nil {
		return err
	}
	e.stopPlatform = e.Platform.Start(200 * time.Millisecond)
	return await(ctx, "the control plane to roll out", 200*time.Millisecond, 2*time.Minute, func(ctx context.Context) (bool, error) {
		if exit := e.Platform.lastExit(); exit != nil {
			return false, exit
		}
		return e.Platform.Settled(ctx)
	}, e.operator)
}

// bootstrapKubeconfig waits for the bootstrap kubeconfig Carousel publishes
// for the Cluster and returns it.
func (e *Environment) bootstrapKubeconfig(ctx context.Context) ([]byte, error) {
	s := &corev1.Secret{}
	err := await(ctx, "the bootstrap kubeconfig", 200*time.Millisecond, time.Minute, func(ctx context.Context) (bool, error) {
		return e.Client.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: credentials.BootstrapKubeconfigSecretName(e.Name)}, s) == nil, nil
	}, e.operator)
	return s.Data[v1alpha1.DataKeyKubeconfig], err
}

func (e *Environment) startAgent(ctx context.Context, name string) error {
	dir := filepath.Join(e.WorkDir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	kubeconfig, err := e.bootstrapKubeconfig(ctx)
	if err != nil {
		return err
	}
	bootstrap := filepath.Join(dir, "bootstrap-kubeconfig")
	if err := os.WriteFile(bootstrap, kubeconfig, 0o600); err != nil {
		return err
	}
	a := &Agent{Name: name, Dir: dir}
	e.logf("starting node agent %s", name)
	// Nothing scrapes the agents' metrics: they bind a port of their choosing.
	a.process, err = startProcess("carousel-node-agent "+name, filepath.Join(e.CarouselBinDir, "carousel-node-agent"), a.LogPath(),
		"--node-name="+name, "--cert-dir="+filepath.Join(dir, "pki"), "--kubeconfig="+filepath.Join(dir, "kubeconfig"),
		"--bootstrap-kubeconfig="+bootstrap, "--register-node", "--pool="+e.Pool, "--node-ip=127.0.0.1", "--heartbeat-interval=2s",
		"--metrics-bind-address=127.0.0.1:0")
	if err != nil {
		return err
	}
	e.Agents = append(e.Agents, a)
	return nil
}

// startKubeletNode provisions a node as a machine's provisioning would
// (Carousel's current bootstrap kubeconfig, the kubelet CA bundle) and starts
// its kubelet.
func (e *Environment) startKubeletNode(ctx context.Context, name, ip string) error {
	bootstrap, err := e.bootstrapKubeconfig(ctx)
	if err != nil {
		return err
	}
	kubeletCA := &corev1.ConfigMap{}
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: credentials.BundleConfigMapName(e.Name, v1alpha1.CARoleKubelet)}, kubeletCA); err != nil {
		return err
	}
	n := &KubeletNode{Name: name, IP: ip, Pool: e.Pool, Dir: filepath.Join(e.WorkDir, name), BinDir: e.KubeBinDir, Netns: e.Netns}
	if err := n.Provision(bootstrap, []byte(kubeletCA.Data[v1alpha1.DataKeyCABundle])); err != nil {
		return err
	}
	e.logf("starting kubelet %s on %s, and the node agent beside it", name, ip)
	if err := n.Start(ctx); err != nil {
		n.Stop()
		return err
	}
	e.Kubelets = append(e.Kubelets, n)
	a, err := n.StartAgent(e.CarouselBinDir)
	if err != nil {
		return err
	}
	e.Agents = append(e.Agents, a)
	return nil
}

// PowerOff stops a node as when its machine is switched off: its node
// agent, kubelet, fake-cri and sandbox. Its files stay.
func (e *Environment) PowerOff(n *KubeletNode) {
	e.logf("powering off node %s", n.Name)
	if i := e.agentIndex(n.Name); i >= 0 {
		stop(e.Agents[i].process)
	}
	n.Stop()
}

// PowerOn starts a node that was powered off, as when its machine comes
// back: the machine's provisioning delivers bootstrapKubeconfig (when not
// nil; nothing else), then the kubelet and the node agent start on the
// node's files.
func (e *Environment) PowerOn(ctx context.Context, n *KubeletNode, bootstrapKubeconfig []byte) error {
	e.logf("powering on node %s", n.Name)
	if bootstrapKubeconfig != nil {
		if err := writeFileAtomic(n.HostPath(nodeBootstrapKubeconfig), bootstrapKubeconfig); err != nil {
			return err
		}
	}
	if err := n.Start(ctx); err != nil {
		n.Stop()
		return err
	}
	a, err := n.StartAgent(e.CarouselBinDir)
	if err != nil {
		return err
	}
	if i := e.agentIndex(n.Name); i >= 0 {
		e.Agents[i] = a
	} else {
		e.Agents = append(e.Agents, a)
	}
	return nil
}

func (e *Environment) agentIndex(name string) int {
	for i, a := range e.Agents {
		if a.Name == name {
			return i
		}
	}
	return -1
}

// ManagedAdmin returns a clientset of the managed cluster with Carousel's
// current admin credential.
func (e *Environment) ManagedAdmin(ctx context.Context) (kubernetes.Interface, error) {
	cfg, err := RESTConfig(ctx, e.Client, e.Cluster, credentials.CertAdmin)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// waitForNodes waits until every node registered its Node and reports it
// Ready, and every kubelet serves with its certificate, and fails at once if
// an agent or the operator exits.
func (e *Environment) waitForNodes(ctx context.Context) error {
	e.logf("waiting for %d nodes to register and be Ready", e.Nodes)
	procs := []*process{e.operator}
	for _, a := range e.Agents {
		procs = append(procs, a.process)
	}
	return await(ctx, fmt.Sprintf("%d nodes to be Ready", e.Nodes), 500*time.Millisecond, 2*time.Minute, func(ctx context.Context) (bool, error) {
		cs, err := e.ManagedAdmin(ctx)
		if err != nil {
			return false, nil
		}
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) != e.Nodes {
			return false, nil
		}
		for _, n := range nodes.Items {
			if !NodeReady(&n) {
				return false, nil
			}
		}
		for _, k := range e.Kubelets {
			if serving, err := k.Serving(ctx); !serving {
				return false, err
			}
		}
		return true, nil
	}, procs...)
}

// NodeReady reports whether a Node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Stop stops every process and the management API server.
func (e *Environment) Stop() {
	if e.stopPlatform != nil {
		e.stopPlatform()
	}
	if e.ClusterAPI != nil {
		e.ClusterAPI.Stop()
	}
	for _, a := range e.Agents {
		stop(a.process)
	}
	for _, k := range e.Kubelets {
		k.Stop()
	}
	stop(e.operator)
	if e.ControlPlane != nil {
		e.ControlPlane.Stop()
	}
	if e.Netns != nil {
		e.Netns.Close()
	}
	if e.Management != nil {
		_ = e.Management.Stop()
	}
	e.ports.release()
	for _, f := range e.logs {
		_ = f.Close()
	}
}
