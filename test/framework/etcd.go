package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// etcdMember is where etcd member i listens: for clients, peers and (with
// several members) its plain-HTTP health endpoints, each at 127.0.0.1 where
// the control plane runs. A single member uses the ports ReservePorts holds.
func (m *ManagedControlPlane) etcdMember(i int) (name, client, peer, health string) {
	at := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	return fmt.Sprintf("m%d", i), at(m.etcdPort + 2*i), at(m.etcdPeerPort + 2*i), at(etcdHealthPort + i)
}

// etcdHealthPort is the health port of the first of several etcd members.
const etcdHealthPort = 12379

// StartEtcd starts the etcd members with TLS for clients and peers, and waits
// until each is ready: with one member, until it listens; with several, until
// each answers /readyz (it has joined a cluster with a leader).
func (m *ManagedControlPlane) StartEtcd(ctx context.Context) error {
	m.etcds = make([]*process, m.etcdMembers())
	if len(m.etcds) == 1 {
		return m.startEtcdMember(ctx, 0, true)
	}
	// None is ready before a quorum runs.
	for i := range m.etcds {
		if err := m.startEtcdMember(ctx, i, false); err != nil {
			return err
		}
	}
	for i := range m.etcds {
		if err := await(ctx, fmt.Sprintf("etcd member %d to be ready", i), 100*time.Millisecond, time.Minute, m.etcdReady(i), m.etcds...); err != nil {
			return err
		}
	}
	return nil
}

// RestartEtcd rolls the etcd members onto the files as they are now, one at
// a time from the last, each once the one before is ready again, as a
// StatefulSet's rolling update does. With one member, etcd is down while it
// restarts.
func (m *ManagedControlPlane) RestartEtcd(ctx context.Context) error {
	for i := len(m.etcds) - 1; i >= 0; i-- {
		stop(m.etcds[i])
		if err := m.startEtcdMember(ctx, i, true); err != nil {
			return err
		}
	}
	return nil
}

// PauseEtcd stops every etcd member (SIGSTOP): the API server's requests
// that need storage are taken and never answered, as with etcd without
// quorum, until resume (SIGCONT), which a spec defers at once. It returns
// once every thread of every member is stopped: a signal is delivered
// asynchronously, and a thread still running on another CPU could answer a
// request sent meanwhile.
func (m *ManagedControlPlane) PauseEtcd() (resume func(), err error) {
	signal := func(sig syscall.Signal) error {
		var errs []error
		for _, p := range m.etcds {
			errs = append(errs, p.cmd.Process.Signal(sig))
		}
		return errors.Join(errs...)
	}
	resume = func() { _ = signal(syscall.SIGCONT) }
	if err := signal(syscall.SIGSTOP); err != nil {
		return resume, err
	}
	for _, p := range m.etcds {
		pid := p.cmd.Process.Pid
		if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
			func(context.Context) (bool, error) { return allThreadsStopped(pid) }); err != nil {
			return resume, fmt.Errorf("etcd (PID %d) did not stop: %w", pid, err)
		}
	}
	return resume, nil
}

// allThreadsStopped reports whether every thread of process pid is stopped
// (state T in /proc/<pid>/task/<tid>/stat).
func allThreadsStopped(pid int) (bool, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false, err
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread ended
		}
		if err != nil {
			return false, err
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 || i+2 >= len(stat) {
			return false, fmt.Errorf("/proc/%d/task/%s/stat: %q", pid, task.Name(), stat)
		}
		if state := stat[i+2]; state != 'T' && state != 't' {
			return false, nil
		}
	}
	return true, nil
}

// etcdReady returns the readiness condition of member i.
func (m *ManagedControlPlane) etcdReady(i int) wait.ConditionWithContextFunc {
	_, client, _, health := m.etcdMember(i)
	if len(m.etcds) == 1 {
		return m.listens(client)
	}
	return m.serves("http://" + health + "/readyz")
}

// startEtcdMember starts member i of the cluster of len(m.etcds) and, when
// waitReady is set, waits until it is ready.
func (m *ManagedControlPlane) startEtcdMember(ctx context.Context, i int, waitReady bool) error {
	name, client, peer, health := m.etcdMember(i)
	files := m.podFiles("etcd-" + name)
	f := files.file
	var cluster []string
	for j := range m.etcds {
		other, _, otherPeer, _ := m.etcdMember(j)
		cluster = append(cluster, other+"=https://"+otherPeer)
	}
	dataDir, logName := m.file("etcd-data"), "etcd"
	var metrics []string
	if len(m.etcds) > 1 {
		dataDir, logName = m.file("etcd-data-"+name), "etcd-"+name
		metrics = []string{"--listen-metrics-urls=http://" + health}
	}
	args := append([]string{
		"--name=" + name, "--data-dir=" + dataDir, "--socket-reuse-port",
		"--listen-client-urls=https://" + client, "--advertise-client-urls=https://" + client,
		"--listen-peer-urls=https://" + peer, "--initial-advertise-peer-urls=https://" + peer,
		"--initial-cluster=" + strings.Join(cluster, ","),
		"--cert-file=" + f("etcd-server.crt"), "--key-file=" + f("etcd-server.key"),
		"--trusted-ca-file=" + f("etcd-ca.crt"), "--client-cert-auth",
		"--peer-cert-file=" + f("etcd-peer.crt"), "--peer-key-file=" + f("etcd-peer.key"),
		"--peer-trusted-ca-file=" + f("etcd-ca.crt"), "--peer-client-cert-auth",
		"--unsafe-no-fsync", "--quota-backend-bytes=268435456",
	}, metrics...)
	if files.err != nil {
		return files.err
	}
	var ready wait.ConditionWithContextFunc
	if waitReady {
		ready = m.etcdReady(i)
	}
	var err error
	m.etcds[i], err = m.startAs(ctx, "etcd", logName, ready, nil, args...)
	return err
}

// etcdServers is the API server's --etcd-servers.
func (m *ManagedControlPlane) etcdServers() string {
	var urls []string
	for i := range m.etcds {
		_, client, _, _ := m.etcdMember(i)
		urls = append(urls, "https://"+client)
	}
	return strings.Join(urls, ",")
}

// EtcdGatewayServes asks every etcd member for its status through its JSON
// gateway (POST /v3/maintenance/status), as a client that verifies the
// member against the etcd bundle and presents the API server's etcd client
// certificate, both as the store holds them now. The gateway passes the
// request on to the member's own gRPC server over TLS, presenting the
// member's serving certificate as its client certificate (etcd's embed
// package dials itself so): a serving certificate without the clientAuth
// usage fails that handshake and the gateway answers an error, while the
// API server, which speaks gRPC to etcd, notices nothing.
func (m *ManagedControlPlane) EtcdGatewayServes(ctx context.Context) error {
	pair, err := tls.LoadX509KeyPair(m.file("apiserver-etcd-client.crt"), m.file("apiserver-etcd-client.key"))
	if err != nil {
		return err
	}
	bundle, err := os.ReadFile(m.file("etcd-ca.crt"))
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		return fmt.Errorf("etcd-ca.crt holds no certificate")
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext:       func(ctx context.Context, _, address string) (net.Conn, error) { return m.dial(ctx, address) },
		TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
	}}
	for i := range m.etcds {
		name, address, _, _ := m.etcdMember(i)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+address+"/v3/maintenance/status", strings.NewReader("{}"))
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("etcd member %s: %w", name, err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = resp.Body.Close()
		switch {
		case err != nil:
			return fmt.Errorf("etcd member %s: %w", name, err)
		case resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"version"`):
			return fmt.Errorf("etcd member %s's gateway answers %s: %s", name, resp.Status, body)
		}
	}
	return nil
}
