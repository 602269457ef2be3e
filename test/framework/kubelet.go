package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// NodeIP returns the address of the i-th node (from 1) in the test network
// namespace: 192.0.2.11, 192.0.2.12, ...
func NodeIP(i int) string { return "192.0.2." + strconv.Itoa(10+i) }

// Paths on a node, as the kubelet and the node agent see them inside the
// node's mount namespace. /var/lib/kubelet is the node's directory Kubelet
// on the host; /var/lib is otherwise an empty tmpfs.
const (
	nodeKubeletDir          = "/var/lib/kubelet"
	nodeKubeletConfig       = nodeKubeletDir + "/config.yaml"
	nodeKubeconfig          = nodeKubeletDir + "/kubeconfig"
	nodeBootstrapKubeconfig = nodeKubeletDir + "/bootstrap-kubeconfig"
	nodeClientCAFile        = nodeKubeletDir + "/ca.crt"
	nodeCertDir             = nodeKubeletDir + "/pki"
	nodeCRISocket           = "/var/lib/fake-cri/cri.sock"
	// KubeletPort and KubeletHealthzPort are bound on the node's own IP.
	KubeletPort        = 10250
	KubeletHealthzPort = 10248
	// NodeLeaseDuration is the kubelets' nodeLeaseDurationSeconds; they
	// renew their Lease every quarter of it.
	NodeLeaseDuration = 8 * time.Second
)

// The sysctls the kubelet sets at start (its setupKernelTunables: the
// overcommit, panic and kernel keys' limits). On a node each is a regular
// file of the node's, seeded with the host's value and bind-mounted over
// /proc/sys, so the kubelet's writes never reach the host.
var kubeletSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

// KubeletNode is a node of the managed cluster: a real kubelet on fake-cri
// (an in-memory CRI runtime), in the test network namespace with an address
// of its own, sandboxed so that it changes nothing on the host. A holder
// process owns the node's mount namespace, made private, in which /var/lib is
// a tmpfs, /var/lib/kubelet and /var/log are the node's directories, and the
// kubelet's sysctls are the node's files; the kubelet, fake-cri and the node
// agent join it with nsenter. Every one of them dies with the test process,
// and the mount namespace, with all of that, goes away with the last of them.
//
// The kubelet runs as under systemd with Restart=always: when it exits, for
// a restart the node agent asked for (by signalling the PID in PIDFile) or
// a crash, it is started again, and the restart is recorded.
type KubeletNode struct {
	Name, IP string
	// Pool is the node's worker pool, a label the kubelet registers the Node with.
	Pool string
	// ProviderID, when set, is the Node's spec.providerID (a Cluster API
	// Machine's, which finds its Node by it).
	ProviderID string
	// Dir is the node's directory on the host: kubelet/ (its
	// /var/lib/kubelet), log/ (its /var/log), sysctl/, and the logs of its
	// processes.
	Dir string
	// BinDir holds kubelet and fake-cri (bin/k8s).
	BinDir string
	Netns  *Netns

	sandbox, cri *process

	mu       sync.Mutex
	kubelet  *process
	stopping bool
	restarts []Window
	// supervised is closed when the supervisor stops.
	supervised chan struct{}
}

// KubeletDir is the node's /var/lib/kubelet on the host.
func (n *KubeletNode) KubeletDir() string { return filepath.Join(n.Dir, "kubelet") }

// PIDFile holds the PID of the running kubelet.
func (n *KubeletNode) PIDFile() string { return filepath.Join(n.Dir, "kubelet.pid") }

// KubeletLogPath is where the kubelet logs, across restarts.
func (n *KubeletNode) KubeletLogPath() string { return filepath.Join(n.Dir, "kubelet.log") }

// Address is the kubelet's HTTPS address.
func (n *KubeletNode) Address() string { return net.JoinHostPort(n.IP, strconv.Itoa(KubeletPort)) }

// HostPath returns where a path of the node's /var/lib/kubelet is on the host.
func (n *KubeletNode) HostPath(nodePath string) string {
	rel, err := filepath.Rel(nodeKubeletDir, nodePath)
	if err != nil || strings.HasPrefix(rel, "..") {
		panic(fmt.Sprintf("%s is not under %s", nodePath, nodeKubeletDir))
	}
	return filepath.Join(n.KubeletDir(), rel)
}

// NodePath returns where a path of the node, as the node's processes see it,
// is on the host: through the root of the sandbox's mount namespace, so that
// what is mounted there (the tmpfs of a pod's projected volume) is seen too.
func (n *KubeletNode) NodePath(nodePath string) string {
	return filepath.Join("/proc", strconv.Itoa(n.sandbox.cmd.Process.Pid), "root", nodePath)
}

// ReadFile reads a file of the node as the kubelet sees it (a path under
// /var/lib/kubelet), following symbolic links, which point at node paths.
func (n *KubeletNode) ReadFile(nodePath string) ([]byte, error) {
	for range 8 {
		target, err := os.Readlink(n.HostPath(nodePath))
		if err != nil {
			return os.ReadFile(n.HostPath(nodePath))
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(nodePath), target)
		}
		nodePath = target
	}
	return nil, fmt.Errorf("%s: too many levels of symbolic links", nodePath)
}

// Kubelet file paths on the node, for ReadFile.
const (
	KubeletClientCertificate  = nodeCertDir + "/kubelet-client-current.pem"
	KubeletServingCertificate = nodeCertDir + "/kubelet-server-current.pem"
	KubeletKubeconfig         = nodeKubeconfig
	KubeletBootstrapConfig    = nodeBootstrapKubeconfig
	KubeletClientCAFile       = nodeClientCAFile
)

// PIDs are the process IDs of the node's sandbox, fake-cri and kubelet.
func (n *KubeletNode) PIDs() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return []int{n.sandbox.cmd.Process.Pid, n.cri.cmd.Process.Pid, n.kubelet.cmd.Process.Pid}
}

// Restarts returns the windows in which the kubelet was down for a restart.
func (n *KubeletNode) Restarts() []Window {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Window(nil), n.restarts...)
}

// Provision writes what a machine's provisioning delivers before the kubelet
// first starts: the bootstrap kubeconfig, the kubelet CA bundle (its
// clientCAFile) and the KubeletConfiguration.
func (n *KubeletNode) Provision(bootstrapKubeconfig, kubeletCABundle []byte) error {
	for _, d := range []string{filepath.Join(n.KubeletDir(), "pki"), filepath.Join(n.Dir, "log"), filepath.Join(n.Dir, "sysctl")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	for path, data := range map[string][]byte{
		nodeBootstrapKubeconfig: bootstrapKubeconfig,
		nodeClientCAFile:        kubeletCABundle,
		nodeKubeletConfig:       []byte(n.kubeletConfig()),
	} {
		if err := writeFileAtomic(n.HostPath(path), data); err != nil {
			return err
		}
	}
	return nil
}

// kubeletConfig is the node's KubeletConfiguration: certificates bootstrapped
// and rotated through the API server, the client CA file, and what lets a
// kubelet run here without a container runtime, cgroup v2 or a say over the
// host's kernel settings.
func (n *KubeletNode) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzBindAddress: %[1]s
healthzPort: %[3]d
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[4]s
authorization:
  mode: Webhook
rotateCertificates: true
serverTLSBootstrap: true
containerRuntimeEndpoint: unix://%[5]s
podLogsDir: /var/log/pods
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
evictionHard: {}
failSwapOn: false
makeIPTablesUtilChains: false
protectKernelDefaults: false
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 10s
nodeLeaseDurationSeconds: %[6]d
providerID: %[7]q
volumePluginDir: /var/lib/kubelet/volume-plugins
`, n.IP, KubeletPort, KubeletHealthzPort, nodeClientCAFile, nodeCRISocket, int(NodeLeaseDuration/time.Second), n.ProviderID)
}

// sandboxScript sets up the node's mount namespace, then holds it.
func (n *KubeletNode) sandboxScript() string {
	var b strings.Builder
	b.WriteString("set -eu\n")
	b.WriteString("mount -t tmpfs -o mode=0755 carousel-node /var/lib\n")
	b.WriteString("mkdir -p /var/lib/kubelet /var/lib/fake-cri\n")
	fmt.Fprintf(&b, "mount --bind %q /var/lib/kubelet\n", n.KubeletDir())
	fmt.Fprintf(&b, "mount --bind %q /var/log\n", filepath.Join(n.Dir, "log"))
	for _, s := range kubeletSysctls {
		// A kernel without the setting (the keys' limits need CONFIG_KEYS)
		// gives the kubelet nothing to write.
		file := filepath.Join(n.Dir, "sysctl", strings.ReplaceAll(s, "/", "."))
		fmt.Fprintf(&b, "if [ -e /proc/sys/%[1]s ]; then cat /proc/sys/%[1]s > %[2]q; mount --bind %[2]q /proc/sys/%[1]s; fi\n", s, file)
	}
	fmt.Fprintf(&b, "touch %q\n", filepath.Join(n.Dir, "sandbox-ready"))
	b.WriteString("exec sleep infinity\n")
	return b.String()
}

// join returns the command line that runs binary with args in the node's
// network and mount namespaces.
func (n *KubeletNode) join(binary string, args ...string) (string, []string) {
	mnt := "/proc/" + strconv.Itoa(n.sandbox.cmd.Process.Pid) + "/ns/mnt"
	return "nsenter", append([]string{"--net=" + n.Netns.Path(), "--mount=" + mnt, "--", binary}, args...)
}

// Start sets up the sandbox, starts fake-cri and the kubelet, and supervises
// the kubelet until Stop. It does not wait for the Node to register.
func (n *KubeletNode) Start(ctx context.Context) error {
	ready := filepath.Join(n.Dir, "sandbox-ready")
	_ = os.Remove(ready)
	binary, args := n.Netns.Wrap("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", n.sandboxScript())
	var err error
	if n.sandbox, err = startProcess("sandbox of "+n.Name, binary, filepath.Join(n.Dir, "sandbox.log"), args...); err != nil {
		return err
	}
	if err := await(ctx, "the sandbox of "+n.Name, 20*time.Millisecond, 30*time.Second, func(context.Context) (bool, error) {
		_, err := os.Stat(ready)
		return err == nil, nil
	}, n.sandbox); err != nil {
		return err
	}
	binary, args = n.join(filepath.Join(n.BinDir, "fake-cri"), "--endpoint=unix://"+nodeCRISocket)
	if n.cri, err = startProcess("fake-cri of "+n.Name, binary, filepath.Join(n.Dir, "fake-cri.log"), args...); err != nil {
		return err
	}
	if err := await(ctx, "fake-cri of "+n.Name, 20*time.Millisecond, 30*time.Second, func(context.Context) (bool, error) {
		_, err := os.Stat(n.NodePath(nodeCRISocket))
		return err == nil, nil
	}, n.cri, n.sandbox); err != nil {
		return err
	}
	n.mu.Lock()
	n.stopping = false
	err = n.startKubelet()
	n.mu.Unlock()
	if err != nil {
		return err
	}
	n.supervised = make(chan struct{})
	go n.supervise()
	return nil
}

// startKubelet starts the kubelet; the caller holds mu.
func (n *KubeletNode) startKubelet() error {
	binary, args := n.join(filepath.Join(n.BinDir, "kubelet"),
		"--config="+nodeKubeletConfig, "--bootstrap-kubeconfig="+nodeBootstrapKubeconfig, "--kubeconfig="+nodeKubeconfig,
		"--cert-dir="+nodeCertDir, "--root-dir="+nodeKubeletDir, "--hostname-override="+n.Name, "--node-ip="+n.IP,
		"--node-labels="+v1alpha1.LabelPool+"="+n.Pool)
	p, err := startProcess("kubelet "+n.Name, binary, n.KubeletLogPath(), args...)
	if err != nil {
		return err
	}
	n.kubelet = p
	return writeFileAtomic(n.PIDFile(), []byte(strconv.Itoa(p.cmd.Process.Pid)))
}

// supervise starts the kubelet again each time it exits, until Stop, and
// records each restart from the exit until the kubelet serves HTTPS again
// (with a serving certificate, which it may first have to ask for), or
// exits again, when the next restart goes on from there. A kubelet that
// runs but does not serve within two minutes records no restart: what
// failed meanwhile is not excused by one.
func (n *KubeletNode) supervise() {
	defer close(n.supervised)
	for {
		n.mu.Lock()
		p := n.kubelet
		n.mu.Unlock()
		<-p.done
		down := time.Now()
		n.mu.Lock()
		// With the holders of the node's namespaces gone (an interrupt
		// reaches every process of the test), a kubelet started now would
		// join whatever process took their PIDs.
		if n.stopping || n.sandbox.exited() || n.Netns.holder.exited() {
			n.mu.Unlock()
			return
		}
		// Under the lock, so that Stop stops the kubelet started last.
		err := n.startKubelet()
		p = n.kubelet
		n.mu.Unlock()
		if err != nil {
			return
		}
		err = await(context.Background(), "the kubelet of "+n.Name+" to serve", 50*time.Millisecond, 2*time.Minute, n.Serving, p)
		if exited := (*ExitError)(nil); err != nil && !errors.As(err, &exited) {
			continue
		}
		n.mu.Lock()
		n.restarts = append(n.restarts, Window{Start: down, End: time.Now()})
		n.mu.Unlock()
	}
}

// Healthy reports whether the kubelet answers its healthz endpoint.
func (n *KubeletNode) Healthy(ctx context.Context) (bool, error) {
	return answersOK(ctx, &http.Transport{DialContext: n.Netns.DialContext, DisableKeepAlives: true},
		"http://"+net.JoinHostPort(n.IP, strconv.Itoa(KubeletHealthzPort))+"/healthz", nil)
}

// restartScript restarts the kubelet as `systemctl restart` would: it stops
// the running kubelet, which the supervisor starts again, and returns once
// the new one runs. It signals the PID only while that process is a kubelet
// (not one that took a freed PID), and gives up after limit: with the test
// process killed no supervisor is left to start a kubelet, and a wait without
// end would keep the node's namespaces alive.
func (n *KubeletNode) restartScript(limit time.Duration) string {
	return fmt.Sprintf(`#!/bin/sh
# Restarts the kubelet of node %[1]s: the framework's supervisor starts it again.
set -eu
pid=$(cat %[2]s)
end=$(( $(date +%%s) + %[3]d ))
wait_a_moment() {
	if [ "$(date +%%s)" -ge "$end" ]; then echo "the kubelet did not restart within %[3]ds" >&2; exit 1; fi
	sleep 0.05
}
case "$(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null || true)" in
*/kubelet\ *) kill -TERM "$pid" ;;
esac
while kill -0 "$pid" 2>/dev/null; do wait_a_moment; done
while [ "$(cat %[2]s)" = "$pid" ]; do wait_a_moment; done
`, n.Name, n.PIDFile(), int(limit/time.Second))
}

// restartLimit bounds a restart of the kubelet by the node agent.
const restartLimit = 2 * time.Minute

// StartAgent starts the node agent beside the kubelet, in the node's
// namespaces, in its kubelet mode: it reads the kubelet's configuration and
// kubeconfig and restarts the kubelet with a script that does what
// `systemctl restart kubelet` does on a machine.
func (n *KubeletNode) StartAgent(carouselBinDir string) (*Agent, error) {
	restart := filepath.Join(n.Dir, "restart-kubelet")
	if err := os.WriteFile(restart, []byte(n.restartScript(restartLimit)), 0o700); err != nil { //nolint:gosec // a script, executable
		return nil, err
	}
	a := &Agent{Name: n.Name, Dir: n.Dir}
	binary, args := n.join(filepath.Join(carouselBinDir, "carousel-node-agent"), append(n.agentFlags(),
		"--kubelet-config="+nodeKubeletConfig, "--kubelet-restart-command="+restart,
		"--metrics-bind-address="+net.JoinHostPort(n.IP, strconv.Itoa(NodeAgentMetricsPort)))...)
	var err error
	a.process, err = startProcess("carousel-node-agent "+n.Name, binary, a.LogPath(), args...)
	return a, err
}

// agentFlags name the node and the kubelet's credentials to the node agent.
func (n *KubeletNode) agentFlags() []string {
	return []string{"--node-name=" + n.Name, "--kubeconfig=" + nodeKubeconfig, "--bootstrap-kubeconfig=" + nodeBootstrapKubeconfig,
		"--cert-dir=" + nodeCertDir}
}

// ProvisionClientCertificate gives the kubelet of a stopped node the client
// certificate and key its machine was provisioned with, as the one it loads
// when it next starts: written into its certificate directory and made
// current, as the kubelet's certificate store does.
func (n *KubeletNode) ProvisionClientCertificate(certPEM, keyPEM []byte) error {
	if n.Running() {
		return fmt.Errorf("node %s is running: its kubelet would not load the certificate", n.Name)
	}
	const file = "kubelet-client-provisioned.pem"
	if err := writeFileAtomic(n.HostPath(nodeCertDir+"/"+file), append(append([]byte{}, certPEM...), keyPEM...)); err != nil {
		return err
	}
	current := n.HostPath(KubeletClientCertificate)
	_ = os.Remove(current + ".tmp")
	if err := os.Symlink(file, current+".tmp"); err != nil {
		return err
	}
	return os.Rename(current+".tmp", current)
}

// NodeAgentMetricsPort is where the node agents serve metrics, on their node's IP.
const NodeAgentMetricsPort = 10271

// ServedCertificate is the certificate the kubelet serves on its HTTPS port.
// It is not verified: the caller checks it against what it expects.
func (n *KubeletNode) ServedCertificate(ctx context.Context) (*x509.Certificate, error) {
	raw, err := n.Netns.DialContext(ctx, "tcp", n.Address())
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // read, not trusted: see above
	defer func() { _ = conn.Close() }()
	if err := conn.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return conn.ConnectionState().PeerCertificates[0], nil
}

// Serving reports whether the kubelet completes a TLS handshake on its HTTPS
// port, which it does only once it holds a serving certificate.
func (n *KubeletNode) Serving(ctx context.Context) (bool, error) {
	_, err := n.ServedCertificate(ctx)
	return err == nil, nil
}

// Running reports whether the node was started and not stopped since.
func (n *KubeletNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.kubelet != nil && !n.stopping
}

// Stop stops the kubelet (not restarting it), fake-cri and the sandbox. The
// node's files stay: Start starts it again on them.
func (n *KubeletNode) Stop() {
	n.mu.Lock()
	n.stopping = true
	p := n.kubelet
	n.mu.Unlock()
	stop(p)
	if n.supervised != nil {
		<-n.supervised
	}
	stop(n.cri)
	stop(n.sandbox)
}
