package main

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/carousel-dev/carousel/pkg/nodeagent"
)

func TestValidate(t *testing.T) {
	kubelet := func() *options {
		return &options{node: "w1", kubeletRestartCommand: nodeagent.DefaultKubeletRestartCommand}
	}
	standIn := func() *options {
		o := kubelet()
		o.registerNode, o.address, o.heartbeat = true, "10.0.0.5", 10*time.Second
		return o
	}
	with := func(o *options, f func(*options)) *options { f(o); return o }
	for _, tt := range []struct {
		name string
		o    *options
		want string // in the error; empty: valid
	}{
		{"kubelet mode", kubelet(), ""},
		{"stand-in mode", standIn(), ""},
		{"no node name", with(kubelet(), func(o *options) { o.node = "" }), "--node-name is required"},
		{"stand-in without --node-ip", with(standIn(), func(o *options) { o.address = "" }), "--node-ip is required with --register-node"},
		{"stand-in with a --node-ip that is no IP", with(standIn(), func(o *options) { o.address = "node-1" }), "not an IP address"},
		{"--node-ip in kubelet mode", with(kubelet(), func(o *options) { o.address = "10.0.0.5" }), "are for --register-node"},
		{"--pool in kubelet mode", with(kubelet(), func(o *options) { o.pool = "a" }), "are for --register-node"},
		{"a certificate TTL", with(kubelet(), func(o *options) { o.ttl = 24 * time.Hour }), ""},
		{"a certificate TTL of the shortest a CSR may ask for", with(standIn(), func(o *options) { o.ttl = 10 * time.Minute }), ""},
		{"a certificate TTL the API server refuses", with(standIn(), func(o *options) { o.ttl = time.Minute }),
			"--certificate-ttl=1m0s: 0 (the signer decides) or from 10m0s to 596523h14m7s, what a CSR may ask for"},
		{"a certificate TTL beyond expirationSeconds", with(kubelet(), func(o *options) { o.ttl = 100 * 365 * 24 * time.Hour }), "--certificate-ttl=876000h0m0s"},
		{"a heartbeat under a second", with(standIn(), func(o *options) { o.heartbeat = 500 * time.Millisecond }), "--heartbeat-interval=500ms: at least 1s"},
		{"a heartbeat of a second", with(standIn(), func(o *options) { o.heartbeat = time.Second }), ""},
		{"no restart command", with(kubelet(), func(o *options) { o.kubeletRestartCommand = nil }), "--kubelet-restart-command is empty"},
		{"a negative restart timeout", with(kubelet(), func(o *options) { o.kubeletRestartTimeout = -time.Second }), "--kubelet-restart-timeout=-1s: must not be negative"},
		{"a restart timeout", with(kubelet(), func(o *options) { o.kubeletRestartTimeout = time.Minute }), ""},
		{"a negative startup timeout", with(standIn(), func(o *options) { o.startupTimeout = -time.Minute }), "--startup-timeout=-1m0s: must not be negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("validate = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

// TestDefaults: kubelet mode by default; no default port that a node
// component already uses; the kubelet's node name rule; no --node-ip.
func TestDefaults(t *testing.T) {
	cmd := newRootCommand()
	flag := func(name string) string { return cmd.Flag(name).DefValue }
	if flag("register-node") != "false" || flag("node-ip") != "" {
		t.Errorf("--register-node %s, --node-ip %q", flag("register-node"), flag("node-ip"))
	}
	_, port, err := net.SplitHostPort(flag("metrics-bind-address"))
	if err != nil {
		t.Fatal(err)
	}
	for _, taken := range []string{"10248", "10249", "10250", "10255", "10256", "10257", "10259", "9100", "9090"} {
		if port == taken {
			t.Errorf("--metrics-bind-address defaults to port %s, which a node component uses", port)
		}
	}
	if name := flag("node-name"); name != strings.ToLower(name) {
		t.Errorf("--node-name defaults to %q, not lowercased as the kubelet's", name)
	}
	if got := flag("kubelet-restart-command"); got != "[systemctl,restart,kubelet.service]" {
		t.Errorf("--kubelet-restart-command defaults to %s", got)
	}
	if got := flag("kubelet-config"); got != "/var/lib/kubelet/config.yaml" {
		t.Errorf("--kubelet-config defaults to %s", got)
	}
}

// refresh-certs run checks its --ttl and --timeout before it reads or
// requests anything; plan refuses what run would: it prints the run command.
func TestRefreshRunRefusesBadFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--seed", "abc", "--ttl", "1m"}, "--ttl=1m0s: 0 (the signer decides) or from 10m0s"},
		{[]string{"run", "--seed", "abc", "--timeout", "-1s"}, "--timeout=-1s: must be positive"},
		{[]string{"run", "--seed", "abc", "--timeout", "0s"}, "--timeout=0s: must be positive"},
		{[]string{"run", "--seed", "abc", "--seed", "a/b"}, `--seed "a/b": the CSR it names, node-csr-refresh-w1-a/b, cannot be created`},
		{[]string{"plan", "--seed", "a/b"}, "cannot be created"},
		{[]string{"plan", "--ttl", "5m"}, "--ttl=5m0s: 0 (the signer decides) or from 10m0s"},
		{[]string{"plan", "--timeout", "-1m"}, "--timeout=-1m0s: must be positive"},
	} {
		cmd := newRefreshCommand(&options{node: "w1", certDir: t.TempDir()})
		cmd.SetArgs(tt.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("refresh-certs %v = %v, want an error saying %q", tt.args, err, tt.want)
		}
	}
	root := newRootCommand()
	dir := t.TempDir() // should the refusal go, nothing of the host's is touched
	root.SetArgs([]string{"refresh-certs", "run", "--node-name", "w1", "--seed", "abc", "--certificate-ttl", "24h",
		"--cert-dir", filepath.Join(dir, "pki"), "--kubeconfig", filepath.Join(dir, "kubeconfig"), "--bootstrap-kubeconfig", filepath.Join(dir, "bootstrap-kubeconfig")})
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "refresh-certs requests --ttl") {
		t.Errorf("refresh-certs run --certificate-ttl 24h = %v, want it refused: the agent's flag, which run ignored", err)
	}
}

// The run command refresh-certs plan prints carries the flags it was given,
// quoted for the shell: for a kubelet with --hostname-override, the node
// name; run without it took the host name, and refused.
func TestRefreshPlanPrintsTheRunCommandForTheSameNode(t *testing.T) {
	root := newRootCommand()
	var out strings.Builder
	root.SetArgs([]string{"refresh-certs", "plan", "--node-name", "worker-1", "--cert-dir", "/srv/kubelet pki", "--seed", "abc", "--ttl", "24h"})
	root.SetOut(&out)
	root.SetErr(io.Discard)
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := "carousel-node-agent refresh-certs run '--cert-dir=/srv/kubelet pki' --node-name=worker-1 --seed abc --ttl 24h0m0s --timeout 5m0s"; !strings.Contains(out.String(), want) {
		t.Errorf("plan printed:\n%s\nwant the run command %q", out.String(), want)
	}
}

// A stop (SIGTERM) while the agent starts is no failure: it exits 0, not
// with the error of the wait it ended.
func TestAStopWhileStartingIsNoFailure(t *testing.T) {
	dir := t.TempDir()
	o := &options{node: "w1", registerNode: true, address: "10.0.0.5", heartbeat: 10 * time.Second, startupTimeout: time.Minute,
		certDir: dir, kubeconfig: dir + "/kubeconfig", bootstrapKubeconfig: dir + "/bootstrap-kubeconfig", keyAlgorithm: "ECDSA-P256"}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := run(ctx, o); err != nil {
		t.Errorf("run, stopped before it obtained a certificate = %v, want nil", err)
	}
}
