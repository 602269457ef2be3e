// Command carousel-node-agent carries out Carousel's in-place credential
// renewals on a node. In kubelet mode (the default) it manages the real
// kubelet's credentials through a CA rotation: the kubelet bootstraps and
// rotates its client certificate, and the agent installs the new trust
// bundles, renews the kubelet's client and serving certificates, and restarts
// the kubelet so that it loads them. In
// stand-in mode (--register-node) it stands in for a kubelet: it obtains the
// node's client certificate with a bootstrap token, rotates it before it
// expires, registers the Node and renews its Lease.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/utils/clock"

	"github.com/carousel-dev/carousel/pkg/csr"
	"github.com/carousel-dev/carousel/pkg/nodeagent"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/shellquote"
	"github.com/carousel-dev/carousel/pkg/version"
)

// defaultMetricsAddress is the metrics endpoint: on the loopback, on a port
// no node component uses by default (10248/10250/10255 kubelet, 10249/10256
// kube-proxy, 10257/10259 kube-controller-manager and kube-scheduler, 9100
// node-exporter, 9090 CRI-O), below the kernel's ephemeral port range.
const defaultMetricsAddress = "127.0.0.1:10271"

type options struct {
	node, certDir, kubeconfig, bootstrapKubeconfig, pool, address, metricsAddr, keyAlgorithm string
	kubeletConfig                                                                            string
	kubeletRestartCommand                                                                    []string
	ttl, startupTimeout, heartbeat, kubeletRestartTimeout                                    time.Duration
	registerNode                                                                             bool
}

// mode is the agent's mode: stand-in with --register-node, else kubelet.
func (o *options) mode() nodeagent.Mode {
	if o.registerNode {
		return nodeagent.ModeStandIn
	}
	return nodeagent.ModeKubelet
}

// validate checks the flags of the agent's mode.
func (o *options) validate() error {
	if o.node == "" {
		return errors.New("--node-name is required")
	}
	if err := checkTTL("--certificate-ttl", o.ttl); err != nil {
		return err
	}
	if o.startupTimeout < 0 {
		return fmt.Errorf("--startup-timeout=%s: must not be negative (0 means 5m, the default)", o.startupTimeout)
	}
	if o.mode() == nodeagent.ModeStandIn {
		if o.address == "" {
			return errors.New("--node-ip is required with --register-node: the stand-in reports it as the Node's InternalIP")
		}
		if net.ParseIP(o.address) == nil {
			return fmt.Errorf("--node-ip %q is not an IP address", o.address)
		}
		if o.heartbeat < time.Second {
			// Its Lease lasts four beats, in whole seconds.
			return fmt.Errorf("--heartbeat-interval=%s: at least 1s", o.heartbeat)
		}
		return nil
	}
	if o.address != "" || o.pool != "" {
		return errors.New("--node-ip and --pool are for --register-node (stand-in mode); in kubelet mode the kubelet registers the Node " +
			"(set its --node-ip and its --node-labels carousel.dev/pool=<pool>)")
	}
	if len(o.kubeletRestartCommand) == 0 {
		return errors.New("--kubelet-restart-command is empty")
	}
	if o.kubeletRestartTimeout < 0 {
		// A renewal would wait for the restarted kubelet not at all, and
		// fail for ever.
		return fmt.Errorf("--kubelet-restart-timeout=%s: must not be negative (0 means 5m, the default)", o.kubeletRestartTimeout)
	}
	return nil
}

// checkTTL checks a validity flag: 0 (the signer decides) or what a CSR's
// spec.expirationSeconds (an int32) may ask for.
func checkTTL(flag string, ttl time.Duration) error {
	if maxTTL := time.Duration(math.MaxInt32) * time.Second; ttl != 0 && (ttl < csr.MinDuration || ttl > maxTTL) {
		return fmt.Errorf("%s=%s: 0 (the signer decides) or from %s to %s, what a CSR may ask for", flag, ttl, csr.MinDuration, maxTTL)
	}
	return nil
}

// kubeletHostname is the node name the kubelet takes when it is not
// overridden: the hostname, lowercased.
func kubeletHostname() string {
	hostname, _ := os.Hostname()
	return strings.ToLower(strings.TrimSpace(hostname))
}

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	o := &options{}
	root := &cobra.Command{
		Use:           "carousel-node-agent",
		Short:         "Rotate a node's kubelet credentials in place through Carousel's CA rotations",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), o) },
		Version:       version.Get().String(),
	}
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	// Without the -v cobra would add: kubectl's -v is the log level.
	root.Flags().Bool("version", false, "Print the version and exit")
	f := root.PersistentFlags()
	f.StringVar(&o.node, "node-name", kubeletHostname(), "Name of the node; the kubelet's default is the lowercased hostname. "+
		"In kubelet mode it must match the kubelet's client certificate (system:node:<name>).")
	f.StringVar(&o.certDir, "cert-dir", "/var/lib/kubelet/pki", "The kubelet's --cert-dir: its client (and serving) key pairs.")
	f.StringVar(&o.kubeconfig, "kubeconfig", "/var/lib/kubelet/kubeconfig", "The kubelet's --kubeconfig (kubelet mode: the kubelet writes it, the agent "+
		"only replaces its trust bundle); in stand-in mode the kubeconfig the agent writes for the current key pair.")
	f.StringVar(&o.bootstrapKubeconfig, "bootstrap-kubeconfig", "/var/lib/kubelet/bootstrap-kubeconfig", "The kubelet's --bootstrap-kubeconfig; "+
		"the agent replaces its trust bundle during a rotation, and in stand-in mode bootstraps with it.")
	f.StringVar(&o.keyAlgorithm, "key-algorithm", string(pki.ECDSAP256), "Algorithm of the node's keys: ECDSA-P256, ECDSA-P384, RSA-2048, RSA-3072 or RSA-4096.")
	f.DurationVar(&o.ttl, "certificate-ttl", 0, "Validity to request for client certificates; 0 leaves it to the signer.")
	root.Flags().DurationVar(&o.startupTimeout, "startup-timeout", 5*time.Minute, "Give up and exit non-zero when no client certificate is obtained "+
		"(stand-in mode) or the kubelet has not bootstrapped (kubelet mode) within this time.")
	root.Flags().StringVar(&o.kubeletConfig, "kubelet-config", nodeagent.DefaultKubeletConfigPath, "The kubelet's --config (KubeletConfiguration), "+
		"kubelet mode: the agent takes clientCAFile and healthz from it and refuses a configuration that cannot be rotated in place.")
	root.Flags().StringSliceVar(&o.kubeletRestartCommand, "kubelet-restart-command", nodeagent.DefaultKubeletRestartCommand,
		"Command (comma-separated argv, run without a shell) that restarts the kubelet, kubelet mode.")
	root.Flags().DurationVar(&o.kubeletRestartTimeout, "kubelet-restart-timeout", nodeagent.DefaultKubeletRestartTimeout,
		"How long to wait, after restarting the kubelet, for its healthz and its new serving certificate before the renewal is retried, kubelet mode.")
	root.Flags().BoolVar(&o.registerNode, "register-node", false, "Stand-in mode: stand in for a kubelet (bootstrap and rotate the client certificate, "+
		"register the Node, renew its Lease) instead of managing a real kubelet's credentials.")
	root.Flags().StringVar(&o.pool, "pool", "", "Worker pool of the node (the carousel.dev/pool label), stand-in mode.")
	root.Flags().StringVar(&o.address, "node-ip", "", "InternalIP of the node, stand-in mode (required there).")
	root.Flags().DurationVar(&o.heartbeat, "heartbeat-interval", 10*time.Second, "How often the node's Lease is renewed, stand-in mode.")
	root.Flags().StringVar(&o.metricsAddr, "metrics-bind-address", defaultMetricsAddress, "Address of the Prometheus metrics endpoint; empty disables it. "+
		"The default port, 10271, is one no node component uses by default (10248-10259 are the kubelet's, kube-proxy's and the control plane's, "+
		"9100 node-exporter's).")
	root.AddCommand(newRefreshCommand(o))
	return root
}

func (o *options) manager(metrics *nodeagent.Metrics) (*nodeagent.Manager, error) {
	alg := pki.KeyAlgorithm(o.keyAlgorithm)
	if _, err := pki.GenerateKey(alg); err != nil {
		return nil, fmt.Errorf("--key-algorithm: %w", err)
	}
	if o.node == "" {
		return nil, errors.New("--node-name is required")
	}
	return nodeagent.NewManager(nodeagent.Config{
		Mode: o.mode(), NodeName: o.node, CertDir: o.certDir, KubeconfigPath: o.kubeconfig, BootstrapKubeconfigPath: o.bootstrapKubeconfig,
		KeyAlgorithm: alg, CertificateTTL: o.ttl, StartupTimeout: o.startupTimeout, Clock: clock.RealClock{}, Metrics: metrics,
	}), nil
}

func run(ctx context.Context, o *options) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := o.validate(); err != nil {
		return err
	}
	var kubelet *nodeagent.Kubelet
	if o.mode() == nodeagent.ModeKubelet {
		cfg, err := nodeagent.LoadKubeletConfig(o.kubeletConfig)
		if err != nil {
			return err
		}
		kubelet = &nodeagent.Kubelet{Config: cfg, Restart: nodeagent.RestartCommand(o.kubeletRestartCommand),
			Healthy: nodeagent.HealthzProbe(cfg.HealthzURL), Serves: nodeagent.ServingProbe(cfg.ServingAddress),
			RestartTimeout: o.kubeletRestartTimeout}
	}
	reg := prometheus.NewRegistry()
	m, err := o.manager(nodeagent.NewMetrics(reg))
	if err != nil {
		return err
	}
	if o.metricsAddr != "" {
		ln, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-bind-address: %w", err)
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close() }()
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s node %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), o.node, fmt.Sprintf(format, args...))
	}
	logf("carousel-node-agent %s", version.Get())
	if kubelet != nil {
		logf("kubelet mode: waiting for the kubelet's kubeconfig %s and client certificate in %s", o.kubeconfig, o.certDir)
	}
	if err := m.Start(ctx); err != nil {
		return stoppedOr(ctx, err, logf)
	}
	if kp := m.Current(); kp != nil {
		logf("%s mode, client certificate valid until %s", o.mode(), kp.Cert.NotAfter.Format(time.RFC3339))
	} else {
		logf("%s mode, resuming an unfinished re-bootstrap of the kubelet", o.mode())
	}
	node := &nodeagent.Node{Manager: m, Kubelet: kubelet, Pool: o.pool, Address: o.address, HeartbeatInterval: o.heartbeat,
		RefusalGrace: nodeagent.DefaultRefusalGrace, Version: version.Get().Version, Logf: logf}
	if kubelet != nil {
		logf("kubelet clientCAFile %s, healthz %s, restart command %q", kubelet.Config.ClientCAFile, kubelet.Config.HealthzURL, o.kubeletRestartCommand)
	} else {
		if err := node.Register(ctx); err != nil {
			return stoppedOr(ctx, err, logf)
		}
		go func() {
			for {
				if err := node.Heartbeat(ctx); err != nil && ctx.Err() == nil {
					logf("heartbeat failed: %v", err)
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(o.heartbeat):
				}
			}
		}()
	}
	go func() { _ = node.WatchRenewals(ctx) }()
	m.Run(ctx)
	return nil
}

// stoppedOr is err, the failure of a step of the agent's start, unless the
// agent was stopped (SIGTERM, SIGINT) during it: a stop is no failure, and
// the step's error (a wait that ended) does not say why it ended.
func stoppedOr(ctx context.Context, err error, logf func(string, ...any)) error {
	if ctx.Err() == nil {
		return err
	}
	logf("stopped while starting")
	return nil
}

// checkSeed refuses a seed that makes no name the API server takes for the
// refresh's CSR (one with a '/' or '%'; the prefix makes it neither '.' nor
// '..'), before a pending key is written for it.
func checkSeed(node, seed string) error {
	// The CSR's name is a path segment of its URL: the API server refuses
	// what could not be one, and checks nothing more of it.
	if name := nodeagent.RefreshCSRName(node, seed); strings.ContainsAny(name, "/%") {
		return fmt.Errorf("--seed %q: the CSR it names, %s, cannot be created: a name holds no '/' or '%%'; take a seed from 'refresh-certs plan'", seed, name)
	}
	return nil
}

// checkRefreshFlags refuses what refresh-certs run would refuse, for plan
// too: it prints the run command.
func checkRefreshFlags(cmd *cobra.Command, node, seed string, ttl, timeout time.Duration) error {
	if err := checkSeed(node, seed); err != nil {
		return err
	}
	if f := cmd.Flags().Lookup("certificate-ttl"); f != nil && f.Changed {
		return errors.New("--certificate-ttl is the agent's own renewals': refresh-certs requests --ttl (default 8760h)")
	}
	if err := checkTTL("--ttl", ttl); err != nil {
		return err
	}
	if timeout <= 0 {
		return fmt.Errorf("--timeout=%s: must be positive", timeout)
	}
	return nil
}

func newRefreshCommand(o *options) *cobra.Command {
	var (
		seed         string
		ttl, timeout time.Duration
	)
	refresh := &cobra.Command{
		Use:   "refresh-certs",
		Short: "Renew the node's client certificate on demand",
	}
	refresh.PersistentFlags().StringVar(&seed, "seed", "", "Names the CSR; plan prints one to pass to run.")
	refresh.PersistentFlags().DurationVar(&ttl, "ttl", 365*24*time.Hour, "Validity to request for the new certificate.")
	refresh.PersistentFlags().DurationVar(&timeout, "timeout", 5*time.Minute, "How long run waits for the CSR to be approved and signed.")
	refresh.AddCommand(&cobra.Command{
		Use:   "plan",
		Short: "Print the CSRs a refresh will create, without changing anything",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if seed == "" {
				b := make([]byte, 4)
				if _, err := rand.Read(b); err != nil {
					return err
				}
				seed = hex.EncodeToString(b)
			}
			if err := checkRefreshFlags(cmd, o.node, seed, ttl, timeout); err != nil {
				return err
			}
			// The run line it prints carries the flags given here, so that
			// it runs for the same node and files.
			var given []string
			cmd.Flags().Visit(func(f *pflag.Flag) {
				if f.Name != "seed" && f.Name != "ttl" && f.Name != "timeout" {
					given = append(given, shellquote.Quote("--"+f.Name+"="+f.Value.String()))
				}
			})
			nodeagent.Plan(cmd.OutOrStdout(), o.node, seed, ttl, timeout, given...)
			return nil
		},
	}, &cobra.Command{
		Use:   "run",
		Short: "Request a new client certificate now and wait for it",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if seed == "" {
				return errors.New("--seed is required: take it from 'refresh-certs plan'")
			}
			if err := checkRefreshFlags(cmd, o.node, seed, ttl, timeout); err != nil {
				return err
			}
			m, err := o.manager(nil)
			if err != nil {
				return err
			}
			if err := m.Refresh(cmd.Context(), seed, ttl, timeout); err != nil {
				return err
			}
			_, _ = fmt.Fprintf(cmd.OutOrStdout(), "node %s: new client certificate valid until %s\n", o.node, m.Current().Cert.NotAfter.Format(time.RFC3339))
			return nil
		},
	})
	return refresh
}
