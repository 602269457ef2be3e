package framework

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	apiserverv1beta1 "k8s.io/apiserver/pkg/apis/apiserver/v1beta1"
	"sigs.k8s.io/yaml"
)

// The tunnel is konnectivity (sigs.k8s.io/apiserver-network-proxy), the
// upstream way for an API server to reach the nodes of a cluster whose
// network it is not part of. Each API server replica runs a
// konnectivity-server next to it, as a sidecar in its pod would, and sends the
// traffic of its "cluster" egress (node proxy, logs and exec, aggregated API
// servers) there over a Unix socket. Agents, a Deployment on the nodes, dial
// the servers through the VPN load balancer at the control plane's address
// and carry that traffic to its destination. In GEP-18's terms the server
// serves the vpn-server certificate to the agents and verifies their
// vpn-client certificates with the VPN bundle; the agents verify the server
// with the same bundle.

// TunnelAgentWorkload is the Deployment of the tunnel's agents.
const TunnelAgentWorkload = "konnectivity-agent"

// Tunnel ports in the network namespace.
const (
	// tunnelAgentPort is where each server accepts agents, on its replica's
	// address, and where the VPN load balancer listens, at 127.0.0.1.
	tunnelAgentPort  = 8132
	tunnelAdminPort  = 8133
	tunnelHealthPort = 8134
	// tunnelAgentPortBase numbers the agents' health and admin ports on
	// 127.0.0.1: agent replica i in slot s (a surge starts the new one in
	// the other slot) uses base+4i+2s and the next one.
	tunnelAgentPortBase = 8140
	// tunnelAgentReplicas is how many agents run: each reaches every node,
	// as the agents of a real cluster reach every node through the pod
	// network.
	tunnelAgentReplicas = 2
	// tunnelAgentDrain is how long a stopping agent drains: on its first
	// SIGTERM it tells the servers to send it no new connection and goes on
	// carrying those it has; the second ends it.
	tunnelAgentDrain = 2 * time.Second
)

// tunnelAgent is one running agent.
type tunnelAgent struct {
	p    *process
	slot int
}

// tunnelServerAddress is where the tunnel server of API server replica i
// accepts agents.
func tunnelServerAddress(i int) string {
	return net.JoinHostPort(apiServerIP(i), strconv.Itoa(tunnelAgentPort))
}

// TunnelServerMetrics is the metrics endpoint of the tunnel server of API
// server replica i, in the network namespace.
func TunnelServerMetrics(i int) string {
	return "http://" + net.JoinHostPort(apiServerIP(i), strconv.Itoa(tunnelHealthPort)) + "/metrics"
}

// tunnelSocket is where the server of API server replica i listens for it.
func (m *ManagedControlPlane) tunnelSocket(i int) string {
	return m.file(fmt.Sprintf("konnectivity-%d.sock", i))
}

// startTunnelListener starts the VPN load balancer, which sends each agent's
// connection to a server in service.
func (m *ManagedControlPlane) startTunnelListener() error {
	ln, err := m.Netns.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(tunnelAgentPort)))
	if err != nil {
		return err
	}
	m.tunnelBalancer = &loadBalancer{dial: m.Netns.DialContext}
	go m.tunnelBalancer.serve(ln)
	return nil
}

// writeEgressSelector writes the egress selector configuration of API
// server replica i: its "cluster" traffic goes through its tunnel server.
func (m *ManagedControlPlane) writeEgressSelector(i int) (string, error) {
	path := m.file(fmt.Sprintf("egress-selector-%d.yaml", i))
	data, err := yaml.Marshal(egressSelector(m.tunnelSocket(i)))
	if err != nil {
		return "", err
	}
	return path, writeFileAtomic(path, data)
}

// egressSelector is an API server's egress selector configuration that
// sends its "cluster" traffic to the tunnel server at socket, over gRPC.
func egressSelector(socket string) *apiserverv1beta1.EgressSelectorConfiguration {
	return &apiserverv1beta1.EgressSelectorConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: apiserverv1beta1.SchemeGroupVersion.String(), Kind: "EgressSelectorConfiguration"},
		EgressSelections: []apiserverv1beta1.EgressSelection{{
			Name: "cluster",
			Connection: apiserverv1beta1.Connection{
				ProxyProtocol: apiserverv1beta1.ProtocolGRPC,
				Transport:     &apiserverv1beta1.Transport{UDS: &apiserverv1beta1.UDSTransport{UDSName: socket}},
			},
		}},
	}
}

// startTunnelServer starts the tunnel server of API server replica i and
// puts it in service behind the VPN load balancer.
func (m *ManagedControlPlane) startTunnelServer(ctx context.Context, i int) error {
	ip := apiServerIP(i)
	name := fmt.Sprintf("konnectivity-server-%d", i)
	files := m.podFiles(name)
	f := files.file
	args := []string{"--mode=grpc", "--uds-name=" + m.tunnelSocket(i), "--delete-existing-uds-file", "--server-port=0",
		"--agent-bind-address=" + ip, "--agent-port=" + strconv.Itoa(tunnelAgentPort),
		"--admin-bind-address=" + ip, "--admin-port=" + strconv.Itoa(tunnelAdminPort),
		"--health-bind-address=" + ip, "--health-port=" + strconv.Itoa(tunnelHealthPort),
		"--cluster-cert=" + f("vpn-server.crt"), "--cluster-key=" + f("vpn-server.key"), "--cluster-ca-cert=" + f("vpn-ca.crt"),
		"--server-id=" + name, "--server-count=" + strconv.Itoa(m.apiServerReplicas())}
	if files.err != nil {
		return files.err
	}
	p, err := m.startAs(ctx, "konnectivity-server", name, m.listens(tunnelServerAddress(i)), nil, args...)
	if err != nil {
		return err
	}
	m.tunnelServers[i] = p
	m.tunnelBalancer.setServing(tunnelServerAddress(i), true)
	return nil
}

// tunnelServerConnected is the startup probe of a restarted tunnel server:
// every agent has connected to it, so that the API server replica started
// after it reaches the nodes from its first request.
func (m *ManagedControlPlane) tunnelServerConnected(i int) wait.ConditionWithContextFunc {
	return func(ctx context.Context) (bool, error) {
		agents, err := m.scrapeGauge(ctx, TunnelServerMetrics(i), "konnectivity_network_proxy_server_ready_backend_connections")
		return err == nil && agents >= tunnelAgentReplicas, nil
	}
}

// stopTunnelServer takes the tunnel server of API server replica i out of
// service and stops it.
func (m *ManagedControlPlane) stopTunnelServer(i int) {
	m.tunnelBalancer.setServing(tunnelServerAddress(i), false)
	stop(m.tunnelServers[i])
	m.tunnelServers[i] = nil
}

// StartTunnelAgents starts the tunnel's agents on the credential files,
// once the API server runs, and waits until each is connected to every
// server.
func (m *ManagedControlPlane) StartTunnelAgents(ctx context.Context) error {
	m.tunnelAgents = make([]*tunnelAgent, tunnelAgentReplicas)
	for i := range m.tunnelAgents {
		a, err := m.startTunnelAgent(ctx, i, 0)
		if err != nil {
			return err
		}
		m.tunnelAgents[i] = a
	}
	m.tunnelAgentsRun.Store(true)
	return nil
}

// RestartTunnelAgents rolls the agents onto the files as they are now, one
// at a time, with a surge, as a Deployment with maxUnavailable 0 does: the
// new agent starts next to the old one, which stops once the new one is
// connected to every server. A request the old one carries when it stops
// fails: the servers spread new requests over the agents they have.
func (m *ManagedControlPlane) RestartTunnelAgents(ctx context.Context) error {
	for i, old := range m.tunnelAgents {
		a, err := m.startTunnelAgent(ctx, i, 1-old.slot)
		if err != nil {
			return err
		}
		m.tunnelAgents[i] = a
		m.stopTunnelAgent(old)
	}
	return nil
}

// stopTunnelAgent drains an agent and stops it. The connections it still
// carries then end: a keep-alive connection of the API server's (to
// metrics-server, say) lives on until it breaks, and a request on it at that
// moment fails. TunnelAgentStops records when the agent had ended, whether
// it ended while draining or was ended after it.
func (m *ManagedControlPlane) stopTunnelAgent(a *tunnelAgent) {
	_ = a.p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.p.done:
	case <-time.After(tunnelAgentDrain):
		stop(a.p)
	}
	m.tunnelAgentStops.add()
}

// TunnelAgentStops returns when each drained agent had ended.
func (m *ManagedControlPlane) TunnelAgentStops() []time.Time { return m.tunnelAgentStops.all() }

// startTunnelAgent starts agent replica i in slot and waits until it is
// connected to every server.
func (m *ManagedControlPlane) startTunnelAgent(ctx context.Context, i, slot int) (*tunnelAgent, error) {
	health := tunnelAgentPortBase + 4*i + 2*slot
	name := fmt.Sprintf("konnectivity-agent-%d-%d", i, slot)
	files := m.podFiles(name)
	f := files.file
	metrics := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(health)) + "/metrics"
	connected := func(ctx context.Context) (bool, error) {
		servers, err := m.scrapeGauge(ctx, metrics, "konnectivity_network_proxy_agent_open_server_connections")
		return err == nil && int(servers) >= m.apiServerReplicas(), nil
	}
	args := []string{"--agent-id=" + name, "--agent-cert=" + f("konnectivity-agent.crt"), "--agent-key=" + f("konnectivity-agent.key"),
		"--ca-cert=" + f("konnectivity-agent-ca.crt"),
		"--proxy-server-host=127.0.0.1", "--proxy-server-port=" + strconv.Itoa(tunnelAgentPort),
		"--health-server-host=127.0.0.1", "--health-server-port=" + strconv.Itoa(health),
		"--admin-bind-address=127.0.0.1", "--admin-server-port=" + strconv.Itoa(health+1),
		// Find a restarted server within a second or two.
		"--sync-interval=500ms", "--sync-interval-cap=2s"}
	if files.err != nil {
		return nil, files.err
	}
	p, err := m.startAs(ctx, "konnectivity-agent", name, connected, nil, args...)
	if err != nil {
		return nil, err
	}
	return &tunnelAgent{p: p, slot: slot}, nil
}

// StopTunnelAgents stops the agents.
func (m *ManagedControlPlane) StopTunnelAgents() {
	for _, a := range m.tunnelAgents {
		if a != nil { // a failed start leaves the rest nil
			stop(a.p)
		}
	}
	m.tunnelAgents = nil
}

// TunnelServerAddresses are where the tunnel servers accept agents.
func (m *ManagedControlPlane) TunnelServerAddresses() []string {
	var addresses []string
	for i := range m.apiServerReplicas() {
		addresses = append(addresses, tunnelServerAddress(i))
	}
	return addresses
}

// TunnelDials returns how many connections the tunnel servers have dialled
// through their agents for the API servers so far, summed over the servers
// that answer.
func (m *ManagedControlPlane) TunnelDials(ctx context.Context) float64 {
	var sum float64
	for i := range m.apiServerReplicas() {
		families, err := m.scrape(ctx, TunnelServerMetrics(i))
		if err != nil {
			continue
		}
		if h := families["konnectivity_network_proxy_server_dial_duration_seconds"]; h != nil {
			for _, metric := range h.GetMetric() {
				sum += float64(metric.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// scrapeGauge reads one gauge without labels from a Prometheus endpoint
// where the control plane runs.
func (m *ManagedControlPlane) scrapeGauge(ctx context.Context, url, name string) (float64, error) {
	families, err := m.scrape(ctx, url)
	if err != nil {
		return 0, err
	}
	family := families[name]
	if family == nil || len(family.GetMetric()) == 0 {
		return 0, fmt.Errorf("%s has no %s", url, name)
	}
	return family.GetMetric()[0].GetGauge().GetValue(), nil
}

// scrape reads a Prometheus endpoint where the control plane runs.
func (m *ManagedControlPlane) scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second, Transport: m.readinessTransport()}).Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}
