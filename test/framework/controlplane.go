// Package framework runs the pieces of a local Carousel environment as real
// processes: a managed cluster's etcd, kube-apiserver and kubelets started on
// the certificates Carousel issued for a Cluster, on loopback or, with real
// kubelets, in a network namespace of their own (see Netns). The integration
// suites, the end-to-end suites and `make run` share it.
package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

// ManagedControlPlane is a managed cluster's etcd and kube-apiserver, run as
// processes on the files written from the Cluster's Secrets and ConfigMaps.
type ManagedControlPlane struct {
	// BinDir holds the etcd and kube-apiserver binaries (KUBEBUILDER_ASSETS).
	BinDir string
	// Dir holds the credential files, etcd's data and the processes' logs.
	Dir string
	// APIServerPort is the port of spec.controlPlane.endpoint.
	APIServerPort int
	// ExtraAPIServerFlags are appended to the API server's command line.
	ExtraAPIServerFlags []string
	// EtcdMembers is how many members the etcd cluster has, with Netns; a
	// rollout restarts one at a time (see RestartEtcd). Without Netns, and
	// when zero, it has one.
	EtcdMembers int
	// APIServerReplicas is how many kube-apiserver replicas run, with Netns,
	// behind the load balancer that Endpoint reaches; a rollout restarts one
	// at a time, out of service (see RestartAPIServer). Without Netns, and
	// when zero, one runs.
	APIServerReplicas int
	// ControllerManager also runs kube-controller-manager and kube-scheduler,
	// each on its own kubeconfig: the controllers of a cluster (the root-CA
	// publisher that fills kube-root-ca.crt in every namespace, the
	// service-account and node-lifecycle controllers, ...) and a scheduler
	// that places pods on the kubelets.
	ControllerManager bool
	// MetricsServer also runs metrics-server, the aggregated API server
	// (see StartMetricsServer); it needs Netns.
	MetricsServer bool
	// Tunnel also runs the konnectivity tunnel through which the API server
	// reaches the nodes and metrics-server (see tunnel.go); it needs Netns.
	Tunnel bool
	// AuditWebhook has the API server send its audit events to Carousel with
	// the kubeconfig of the Cluster's audit-webhook Secret (WriteCredentials
	// writes it), under a policy that records every request's metadata.
	AuditWebhook bool
	// Netns, when set, is where the processes run: each API server replica
	// listens on, and advertises, an address of its own (APIServerIPs) and
	// reaches kubelets on theirs; a load balancer listens at 127.0.0.1 on the
	// same port, and Endpoint, a loopback port of the test's namespace, is
	// forwarded to it. Nil runs everything on loopback.
	Netns *Netns

	etcdPort, etcdPeerPort int
	ports                  portSet
	kcm, scheduler         *process
	etcds                  []*process    // by member
	apiservers             []*process    // by replica
	loadBalancer           *loadBalancer // with Netns
	metricsServer          *process
	metricsServerPort      atomic.Int32  // read by the tests while the platform rolls it
	tunnelBalancer         *loadBalancer // the VPN endpoint, with Tunnel
	tunnelServers          []*process    // by API server replica
	tunnelAgents           []*tunnelAgent
	tunnelAgentsRun        atomic.Bool // read while the platform rolls the API server
	tunnelAgentStops       timeline    // read by the tests while the platform rolls
}

// timeline records when something happened to the control plane, so that
// the tests can tell the failures it causes. It is safe for concurrent use.
type timeline struct {
	mu    sync.Mutex
	times []time.Time
}

func (t *timeline) add() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.times = append(t.times, time.Now())
}

func (t *timeline) all() []time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.times)
}

// ControlPlaneIP is the managed API server's address in the test network
// namespace (of its first replica; the others have the next ones); nodes get
// the ones after NodeIPBase.
const ControlPlaneIP = "192.0.2.1"

// APIServerIPs are the addresses of n API server replicas in the test network
// namespace.
func APIServerIPs(n int) []string {
	ips := make([]string, 0, n)
	for i := range n {
		ips = append(ips, apiServerIP(i))
	}
	return ips
}

// apiServerIP is the address of API server replica i in the test network
// namespace.
func apiServerIP(i int) string {
	base := net.ParseIP(ControlPlaneIP).To4()
	return net.IPv4(base[0], base[1], base[2], base[3]+byte(i)).String() //nolint:gosec // a handful of replicas
}

// apiServerReplicas is how many API server replicas run.
func (m *ManagedControlPlane) apiServerReplicas() int {
	return replicasWithNetns(m.Netns, m.APIServerReplicas)
}

// etcdMembers is how many members etcd has.
func (m *ManagedControlPlane) etcdMembers() int { return replicasWithNetns(m.Netns, m.EtcdMembers) }

func replicasWithNetns(netns *Netns, n int) int {
	if netns == nil || n < 1 {
		return 1
	}
	return n
}

// command returns the command line that runs binary with args where the
// control plane runs.
func (m *ManagedControlPlane) command(binary string, args []string) (string, []string) {
	if m.Netns == nil {
		return binary, args
	}
	return m.Netns.Wrap(binary, args...)
}

// dial opens a connection to address where the control plane runs.
func (m *ManagedControlPlane) dial(ctx context.Context, address string) (net.Conn, error) {
	if m.Netns == nil {
		return (&net.Dialer{}).DialContext(ctx, "tcp", address)
	}
	return m.Netns.DialContext(ctx, "tcp", address)
}

// Endpoint is the API server's URL, for spec.controlPlane.endpoint.
func (m *ManagedControlPlane) Endpoint() string {
	return "https://127.0.0.1:" + strconv.Itoa(m.APIServerPort)
}

// credentialFiles maps a file under Dir to the Secret (or bundle ConfigMap,
// when the role is set) and key it is written from.
type credentialFile struct {
	file, secret, key string
	bundle            v1alpha1.CARole
}

func credentialFiles(cluster string) []credentialFile {
	cert := func(file, name, key string) credentialFile {
		return credentialFile{file: file, secret: credentials.CertificateSecretName(cluster, name), key: key}
	}
	return []credentialFile{
		{file: "etcd-ca.crt", bundle: v1alpha1.CARoleEtcd},
		{file: "client-ca.crt", bundle: v1alpha1.CARoleClient},
		{file: "front-proxy-ca.crt", bundle: v1alpha1.CARoleFrontProxy},
		{file: "kubelet-ca.crt", bundle: v1alpha1.CARoleKubelet},
		cert("etcd-server.crt", credentials.CertEtcdServer, v1alpha1.DataKeyCertificate),
		cert("etcd-server.key", credentials.CertEtcdServer, v1alpha1.DataKeyPrivateKey),
		cert("etcd-peer.crt", credentials.CertEtcdPeer, v1alpha1.DataKeyCertificate),
		cert("etcd-peer.key", credentials.CertEtcdPeer, v1alpha1.DataKeyPrivateKey),
		cert("apiserver.crt", credentials.CertKubeAPIServer, v1alpha1.DataKeyCertificate),
		cert("apiserver.key", credentials.CertKubeAPIServer, v1alpha1.DataKeyPrivateKey),
		cert("apiserver-etcd-client.crt", credentials.CertKubeAPIServerEtcdClient, v1alpha1.DataKeyCertificate),
		cert("apiserver-etcd-client.key", credentials.CertKubeAPIServerEtcdClient, v1alpha1.DataKeyPrivateKey),
		cert("apiserver-kubelet-client.crt", credentials.CertKubeAPIServerKubelet, v1alpha1.DataKeyCertificate),
		cert("apiserver-kubelet-client.key", credentials.CertKubeAPIServerKubelet, v1alpha1.DataKeyPrivateKey),
		cert("front-proxy-client.crt", credentials.CertFrontProxyClient, v1alpha1.DataKeyCertificate),
		cert("front-proxy-client.key", credentials.CertFrontProxyClient, v1alpha1.DataKeyPrivateKey),
		{file: "kcm-root-ca.crt", bundle: v1alpha1.CARoleCluster},
		cert("kcm.kubeconfig", credentials.CertKubeControllerManager, v1alpha1.DataKeyKubeconfig),
		{file: "kcm-sa.key", secret: credentials.ServiceAccountKeySecretName(cluster), key: credentials.DataKeyServiceAccountKey},
		cert("scheduler.kubeconfig", credentials.CertKubeScheduler, v1alpha1.DataKeyKubeconfig),
		cert("vpn-server.crt", credentials.CertVPNServer, v1alpha1.DataKeyCertificate),
		cert("vpn-server.key", credentials.CertVPNServer, v1alpha1.DataKeyPrivateKey),
		{file: "vpn-ca.crt", bundle: v1alpha1.CARoleVPN},
		cert("konnectivity-agent.crt", credentials.CertVPNClient, v1alpha1.DataKeyCertificate),
		cert("konnectivity-agent.key", credentials.CertVPNClient, v1alpha1.DataKeyPrivateKey),
		{file: "konnectivity-agent-ca.crt", bundle: v1alpha1.CARoleVPN},
		cert("metrics-server.crt", credentials.CertMetricsServer, v1alpha1.DataKeyCertificate),
		cert("metrics-server.key", credentials.CertMetricsServer, v1alpha1.DataKeyPrivateKey),
		{file: "metrics-server-cluster-ca.crt", bundle: v1alpha1.CARoleCluster},
		{file: "metrics-server-kubelet-ca.crt", bundle: v1alpha1.CARoleKubelet},
		{file: "sa.key", secret: credentials.ServiceAccountKeySecretName(cluster), key: credentials.DataKeyServiceAccountKey},
		{file: "sa.pub", secret: credentials.ServiceAccountKeySecretName(cluster), key: credentials.DataKeyServiceAccountPublicKey},
	}
}

// WriteCredentials writes the Cluster's current credentials into Dir, each
// file replaced atomically. Dir plays the Secrets and ConfigMaps: a process
// gets copies of its files when it starts (see podFiles).
func (m *ManagedControlPlane) WriteCredentials(ctx context.Context, c client.Reader, cluster *v1alpha1.Cluster) error {
	if err := os.MkdirAll(m.Dir, 0o700); err != nil {
		return err
	}
	for _, f := range credentialFiles(cluster.Name) {
		var data []byte
		if f.bundle != "" {
			cm := &corev1.ConfigMap{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: credentials.BundleConfigMapName(cluster.Name, f.bundle)}, cm); err != nil {
				return err
			}
			data = []byte(cm.Data[v1alpha1.DataKeyCABundle])
		} else {
			s := &corev1.Secret{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: f.secret}, s); err != nil {
				return err
			}
			data = s.Data[f.key]
		}
		if len(data) == 0 {
			return fmt.Errorf("no data for %s", f.file)
		}
		if err := writeFileAtomic(filepath.Join(m.Dir, f.file), data); err != nil {
			return err
		}
	}
	if !m.AuditWebhook {
		return nil
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: credentials.AuditWebhookSecretName(cluster.Name)}, s); err != nil {
		return err
	}
	return writeFileAtomic(m.file(auditWebhookKubeconfig), s.Data[v1alpha1.DataKeyKubeconfig])
}

// auditWebhookKubeconfig is the file, under Dir, of the audit webhook's kubeconfig.
const auditWebhookKubeconfig = "audit-webhook.kubeconfig"

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReservePorts picks the API server's port (when APIServerPort is 0) and
// etcd's, and holds them until Stop: no other program can take them before
// the processes start or while they restart. Start calls it. With a Netns,
// only the API server's port is taken in the test's namespace, by the
// listener that forwards it into the namespace, where it and etcd's are free:
// there, the load balancer listens on it at 127.0.0.1, and the replicas on
// their own addresses.
func (m *ManagedControlPlane) ReservePorts() error {
	if m.Netns != nil {
		if m.etcdPort != 0 {
			return nil
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(m.APIServerPort)))
		if err != nil {
			return err
		}
		m.APIServerPort = ln.Addr().(*net.TCPAddr).Port
		inside := net.JoinHostPort("127.0.0.1", strconv.Itoa(m.APIServerPort))
		balanced, err := m.Netns.Listen("tcp", inside)
		if err != nil {
			_ = ln.Close()
			return err
		}
		m.loadBalancer = &loadBalancer{dial: m.Netns.DialContext}
		go m.loadBalancer.serve(balanced)
		m.Netns.Forward(ln, inside)
		m.etcdPort, m.etcdPeerPort = 2379, 2380
		if m.Tunnel {
			return m.startTunnelListener()
		}
		return nil
	}
	for _, port := range []*int{&m.APIServerPort, &m.etcdPort, &m.etcdPeerPort} {
		var err error
		if *port, err = m.ports.hold(*port); err != nil {
			return err
		}
	}
	return nil
}

// Start starts etcd and then the API server, and waits until the API server is ready.
func (m *ManagedControlPlane) Start(ctx context.Context) error {
	if err := m.ReservePorts(); err != nil {
		return err
	}
	if err := m.StartEtcd(ctx); err != nil {
		return err
	}
	if err := m.StartAPIServer(ctx); err != nil {
		return err
	}
	if !m.ControllerManager {
		return nil
	}
	if err := m.StartControllerManager(); err != nil {
		return err
	}
	return m.StartScheduler()
}

// StartControllerManager starts kube-controller-manager on its own
// credentials, with its default controllers but CSR approval and signing,
// which are Carousel's. The root-CA publisher keeps kube-root-ca.crt in every
// namespace equal to the cluster bundle (--root-ca-file); the service-account
// token controller signs with the key Carousel issued; each controller
// talks to the API server as its own service account, as kubeadm sets it up.
func (m *ManagedControlPlane) StartControllerManager() (err error) {
	files := m.podFiles("kube-controller-manager")
	args := []string{"--kubeconfig=" + files.file("kcm.kubeconfig"), "--root-ca-file=" + files.file("kcm-root-ca.crt"),
		"--service-account-private-key-file=" + files.file("kcm-sa.key"), "--use-service-account-credentials=true",
		"--controllers=*,-csrsigning,-csrapproving",
		"--leader-elect=false", "--secure-port=0",
		// Its FlexVolume prober makes this directory: the host's
		// /usr/libexec/kubernetes/... by default.
		"--flex-volume-plugin-dir=" + filepath.Join(m.Dir, "kcm-volume-plugins")}
	if files.err != nil {
		return files.err
	}
	m.kcm, err = m.startComponent("kube-controller-manager", args...)
	return err
}

// StartScheduler starts kube-scheduler on its own kubeconfig.
func (m *ManagedControlPlane) StartScheduler() (err error) {
	files := m.podFiles("kube-scheduler")
	kubeconfig := files.file("scheduler.kubeconfig")
	if files.err != nil {
		return files.err
	}
	m.scheduler, err = m.startComponent("kube-scheduler", "--kubeconfig="+kubeconfig, "--leader-elect=false", "--secure-port=0")
	return err
}

// startComponent starts one of the binaries that talk to the API server
// only (nothing waits for them to listen), logging beside the credentials.
func (m *ManagedControlPlane) startComponent(name string, args ...string) (*process, error) {
	binary, args := m.command(filepath.Join(m.BinDir, name), args)
	return startProcess(name, binary, m.file(name+".log"), args...)
}

// file is the path of one of the control plane's files.
func (m *ManagedControlPlane) file(name string) string { return filepath.Join(m.Dir, name) }

// StopScheduler stops kube-scheduler, if it runs, and waits for it to exit.
func (m *ManagedControlPlane) StopScheduler() { stop(m.scheduler); m.scheduler = nil }

// StartAPIServer starts the kube-apiserver replicas on the credential files,
// one after the other, each once the one before answers /readyz.
func (m *ManagedControlPlane) StartAPIServer(ctx context.Context) error {
	m.apiservers = make([]*process, m.apiServerReplicas())
	m.tunnelServers = make([]*process, m.apiServerReplicas())
	for i := range m.apiservers {
		if err := m.startAPIServerReplica(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// apiServerAddress is where replica i listens: its own address in the
// network namespace, or loopback.
func (m *ManagedControlPlane) apiServerAddress(i int) string {
	ip := "127.0.0.1"
	if m.Netns != nil {
		ip = apiServerIP(i)
	}
	return net.JoinHostPort(ip, strconv.Itoa(m.APIServerPort))
}

// startAPIServerReplica starts replica i, waits until it answers /readyz and
// puts it in service.
func (m *ManagedControlPlane) startAPIServerReplica(ctx context.Context, i int) error {
	address := m.apiServerAddress(i)
	ip, _, _ := net.SplitHostPort(address)
	name := "kube-apiserver"
	if i > 0 {
		name = fmt.Sprintf("kube-apiserver-%d", i)
	}
	files := m.podFiles(name)
	f := files.file
	var aggregatorRouting []string
	if m.Netns != nil {
		// The aggregator dials an APIService's endpoints, not its Service's
		// cluster IP: there is no kube-proxy.
		aggregatorRouting = []string{"--enable-aggregator-routing=true"}
	}
	args := []string{
		"--bind-address=" + ip, "--advertise-address=" + ip, "--secure-port=" + strconv.Itoa(m.APIServerPort),
		"--permit-port-sharing", // binds the port ReservePorts holds
		"--etcd-servers=" + m.etcdServers(),
		"--etcd-cafile=" + f("etcd-ca.crt"), "--etcd-certfile=" + f("apiserver-etcd-client.crt"), "--etcd-keyfile=" + f("apiserver-etcd-client.key"),
		"--tls-cert-file=" + f("apiserver.crt"), "--tls-private-key-file=" + f("apiserver.key"),
		"--client-ca-file=" + f("client-ca.crt"),
		"--kubelet-client-certificate=" + f("apiserver-kubelet-client.crt"), "--kubelet-client-key=" + f("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority=" + f("kubelet-ca.crt"), "--kubelet-preferred-address-types=InternalIP",
		"--requestheader-client-ca-file=" + f("front-proxy-ca.crt"), "--requestheader-allowed-names=" + credentials.CertFrontProxyClient,
		"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + f("front-proxy-client.crt"), "--proxy-client-key-file=" + f("front-proxy-client.key"),
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file=" + f("sa.pub"), "--service-account-signing-key-file=" + f("sa.key"),
		"--service-cluster-ip-range=10.96.0.0/12",
		"--authorization-mode=Node,RBAC", "--enable-bootstrap-token-auth", "--enable-admission-plugins=NodeRestriction",
		"--cert-dir=" + m.file(name+"-certs"),
	}
	if files.err != nil {
		return files.err
	}
	if m.Tunnel {
		egress, err := m.writeEgressSelector(i)
		if err != nil {
			return err
		}
		if err := m.startTunnelServer(ctx, i); err != nil {
			return err
		}
		if m.tunnelAgentsRun.Load() {
			// As a native sidecar whose startup probe waits for the agents:
			// an API server that started before could find the tunnel
			// empty, and its aggregator would then mark metrics-server's
			// APIService unavailable for every replica.
			if err := await(ctx, fmt.Sprintf("the agents to connect to konnectivity-server-%d", i), 100*time.Millisecond, time.Minute,
				m.tunnelServerConnected(i), m.tunnelServers[i]); err != nil {
				return err
			}
		}
		args = append(args, "--egress-selector-config-file="+egress)
	}
	policy, err := m.writeAuditPolicy()
	if err != nil {
		return err
	}
	args = append(args, "--audit-policy-file="+policy, "--audit-log-path="+m.file(name+"-audit.log"))
	if m.AuditWebhook {
		// Batches leave within a second, and the log of every request stays small.
		args = append(args, "--audit-webhook-config-file="+m.file(auditWebhookKubeconfig), "--audit-webhook-batch-max-wait=1s",
			"--audit-webhook-initial-backoff=1s", "--audit-log-maxsize=50", "--audit-log-maxbackup=1")
	}
	args = append(append(args, aggregatorRouting...), m.ExtraAPIServerFlags...)
	// A single etcd member's exit fails the start at once; of several, one
	// may be restarting meanwhile.
	var needs []*process
	if len(m.etcds) == 1 {
		needs = m.etcds
	}
	m.apiservers[i], err = m.startAs(ctx, "kube-apiserver", name, m.serves("https://"+address+"/readyz"), needs, args...)
	if err == nil && m.loadBalancer != nil {
		m.loadBalancer.setServing(address, true)
	}
	return err
}

// nodeLeaseAuditPolicy has the API server record who creates and deletes
// node Leases (<replica>-audit.log): a Lease list right after control-plane
// restarts has been seen to lack Leases that a read by name then did not
// find either, and then did a moment later.
const nodeLeaseAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "delete", "deletecollection"]
  resources: [{group: "coordination.k8s.io", resources: ["leases"]}]
  namespaces: ["kube-node-lease"]
- level: None
`

// EveryRequestAuditPolicy is the policy docs/reference/cluster-api.md asks of
// a managed API server for the old-CA usage gate. It records, for the audit
// webhook, who made every request (and no request or response body) once the
// request ends, and a long-running one's also once its response starts. It omits
// RequestReceived, the one stage whose event an API server must store
// before it serves the request: a stopping kube-apiserver shuts its audit
// backend down without waiting for long-running requests, and fails one
// that arrives then with 500 "failed to store audit event".
const EveryRequestAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
omitManagedFields: true
rules:
- level: Metadata
`

// writeAuditPolicy writes the audit policy, nodeLeaseAuditPolicy or, for the
// audit webhook, EveryRequestAuditPolicy, and returns its path.
func (m *ManagedControlPlane) writeAuditPolicy() (string, error) {
	path, policy := m.file("audit-policy.yaml"), nodeLeaseAuditPolicy
	if m.AuditWebhook {
		policy = EveryRequestAuditPolicy
	}
	return path, writeFileAtomic(path, []byte(policy))
}

// StopControllerManager stops kube-controller-manager, if it runs, and waits
// for it to exit.
func (m *ManagedControlPlane) StopControllerManager() { stop(m.kcm); m.kcm = nil }

// StopAPIServer stops every API server replica and waits for them to exit.
func (m *ManagedControlPlane) StopAPIServer() {
	for i := range m.apiservers {
		m.stopAPIServerReplica(i)
	}
	m.apiservers = nil
}

// stopAPIServerReplica takes replica i out of service, stops it and waits
// for it to exit.
func (m *ManagedControlPlane) stopAPIServerReplica(i int) {
	if m.loadBalancer != nil {
		m.loadBalancer.setServing(m.apiServerAddress(i), false)
	}
	stop(m.apiservers[i])
	m.apiservers[i] = nil
	if m.Tunnel {
		m.stopTunnelServer(i)
	}
}

// Stop stops every process and lets go of the ports.
func (m *ManagedControlPlane) Stop() {
	m.StopTunnelAgents()
	m.StopMetricsServer()
	m.StopScheduler()
	m.StopControllerManager()
	m.StopAPIServer()
	for _, p := range m.etcds {
		stop(p)
	}
	m.etcds = nil
	m.ports.release()
}

// RestartAPIServer rolls the API server replicas onto the files as they are
// now, one at a time, as a Deployment with maxUnavailable 0 does: each is
// taken out of service, stopped (it finishes the requests it has and closes
// its connections, whose clients reconnect to a replica in service), started
// again and put back in service once ready, then serves next to the replicas
// not rolled yet for apiServerRollOverlap before the next is taken out, as a
// Deployment's new and old pods both stand behind its Service for a while.
// With one replica, the API server is down while it restarts.
func (m *ManagedControlPlane) RestartAPIServer(ctx context.Context) error {
	for i := range m.apiservers {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(apiServerRollOverlap):
			}
		}
		m.stopAPIServerReplica(i)
		if err := m.startAPIServerReplica(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// apiServerRollOverlap is how long a rolled API server replica serves next to
// the ones not rolled yet: clients meet both versions of the files, as they
// do in a Deployment rollout.
const apiServerRollOverlap = 5 * time.Second

// start starts one of the control plane's binaries on the ports
// ReservePorts holds and waits, for a minute at most, until it is ready or
// it or one of needs exits.
func (m *ManagedControlPlane) start(ctx context.Context, name string, ready wait.ConditionWithContextFunc, needs []*process, args ...string) (*process, error) {
	return m.startAs(ctx, name, name, ready, needs, args...)
}

// startAs is start for a binary whose process is called name (its log is
// name.log).
func (m *ManagedControlPlane) startAs(ctx context.Context, binaryName, name string, ready wait.ConditionWithContextFunc, needs []*process, args ...string) (*process, error) {
	binary, args := m.command(filepath.Join(m.BinDir, binaryName), args)
	return startChild(ctx, child{
		name: name, binary: binary, logPath: filepath.Join(m.Dir, name+".log"),
		args: fixedArgs(args...), ready: ready, timeout: time.Minute, watch: needs,
	})
}

// listens returns a condition that holds once something accepts TCP
// connections on address where the control plane runs, which only the child
// can do on a held port.
func (m *ManagedControlPlane) listens(address string) wait.ConditionWithContextFunc {
	return func(ctx context.Context) (bool, error) {
		conn, err := m.dial(ctx, address)
		if err != nil {
			return false, nil
		}
		_ = conn.Close()
		return true, nil
	}
}

// serves returns a condition that holds once a GET of url, a server where
// the control plane runs, answers 200.
func (m *ManagedControlPlane) serves(url string) wait.ConditionWithContextFunc {
	transport := m.readinessTransport()
	return func(ctx context.Context) (bool, error) { return answersOK(ctx, transport, url, nil) }
}

// readinessTransport reaches servers where the control plane runs, without
// verifying them (readiness only; the tests verify the chains), presenting
// certificates.
func (m *ManagedControlPlane) readinessTransport(certificates ...tls.Certificate) *http.Transport {
	return &http.Transport{
		DialContext:       func(ctx context.Context, _, address string) (net.Conn, error) { return m.dial(ctx, address) },
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, Certificates: certificates}, //nolint:gosec // see above
		DisableKeepAlives: true,
	}
}

// answersOK reports whether a GET of url with header through transport
// answers 200; a request that fails is a no, not an error.
func answersOK(ctx context.Context, transport http.RoundTripper, url string, header http.Header) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	req.Header = header
	resp, err := (&http.Client{Timeout: 2 * time.Second, Transport: transport}).Do(req)
	if err != nil {
		return false, nil
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

// RESTConfig returns a config for the managed API server from one of the
// Cluster's kubeconfig Secrets (admin, carousel-operator, ...).
func RESTConfig(ctx context.Context, c client.Reader, cluster *v1alpha1.Cluster, certificate string) (*rest.Config, error) {
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: credentials.CertificateSecretName(cluster.Name, certificate)}, s); err != nil {
		return nil, err
	}
	return clientcmd.RESTConfigFromKubeConfig(s.Data[v1alpha1.DataKeyKubeconfig])
}
