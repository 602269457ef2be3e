// Command carousel-node-agent is the node side of kubelet TLS bootstrapping:
// it obtains the node's client certificate with a bootstrap token, rotates it
// before it expires, carries out Carousel's in-place credential renewals, and
// (with --register-node) registers the Node and renews its Lease for a
// kubelet that does not.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"k8s.io/utils/clock"

	"github.com/carousel-dev/carousel/pkg/nodeagent"
	"github.com/carousel-dev/carousel/pkg/pki"
)

type options struct {
	node, certDir, kubeconfig, bootstrapKubeconfig, pool, address, metricsAddr, keyAlgorithm string
	ttl, startupTimeout, heartbeat                                                           time.Duration
	registerNode                                                                             bool
}

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	o := &options{}
	hostname, _ := os.Hostname()
	root := &cobra.Command{
		Use:           "carousel-node-agent",
		Short:         "Obtain, store and rotate a node's kubelet client certificate",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), o) },
	}
	f := root.PersistentFlags()
	f.StringVar(&o.node, "node-name", hostname, "Name of the node.")
	f.StringVar(&o.certDir, "cert-dir", "/var/lib/kubelet/pki", "Directory of the client key pairs.")
	f.StringVar(&o.kubeconfig, "kubeconfig", "/var/lib/kubelet/kubeconfig", "Kubeconfig the agent writes for the current key pair.")
	f.StringVar(&o.bootstrapKubeconfig, "bootstrap-kubeconfig", "/var/lib/kubelet/bootstrap-kubeconfig", "Kubeconfig with a bootstrap token, used when no valid key pair exists.")
	f.StringVar(&o.keyAlgorithm, "key-algorithm", string(pki.ECDSAP256), "Algorithm of the node's keys: ECDSA-P256, ECDSA-P384, RSA-2048, RSA-3072 or RSA-4096.")
	f.DurationVar(&o.ttl, "certificate-ttl", 0, "Validity to request for client certificates; 0 leaves it to the signer.")
	root.Flags().DurationVar(&o.startupTimeout, "startup-timeout", 5*time.Minute, "Give up and exit non-zero when no certificate is obtained within this time.")
	root.Flags().BoolVar(&o.registerNode, "register-node", false, "Register the Node and renew its Lease, as a kubelet would.")
	root.Flags().StringVar(&o.pool, "pool", "", "Worker pool of the node (the carousel.dev/pool label), with --register-node.")
	root.Flags().StringVar(&o.address, "node-ip", "127.0.0.1", "InternalIP of the node, with --register-node.")
	root.Flags().DurationVar(&o.heartbeat, "heartbeat-interval", 10*time.Second, "How often the node's Lease is renewed, with --register-node.")
	root.Flags().StringVar(&o.metricsAddr, "metrics-bind-address", "127.0.0.1:10249", "Address of the Prometheus metrics endpoint; empty disables it.")
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
		NodeName: o.node, CertDir: o.certDir, KubeconfigPath: o.kubeconfig, BootstrapKubeconfigPath: o.bootstrapKubeconfig,
		KeyAlgorithm: alg, CertificateTTL: o.ttl, StartupTimeout: o.startupTimeout, Clock: clock.RealClock{}, Metrics: metrics,
	}), nil
}

func run(ctx context.Context, o *options) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
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
	if err := m.Start(ctx); err != nil {
		return err
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s node %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), o.node, fmt.Sprintf(format, args...))
	}
	logf("client certificate valid until %s", m.Current().Cert.NotAfter.Format(time.RFC3339))
	if o.registerNode {
		node := &nodeagent.Node{Manager: m, Pool: o.pool, Address: o.address, HeartbeatInterval: o.heartbeat,
			Logf: logf}
		if err := node.Register(ctx); err != nil {
			return err
		}
		go func() { _ = node.WatchRenewals(ctx) }()
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
	m.Run(ctx)
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
			nodeagent.Plan(cmd.OutOrStdout(), o.node, seed, ttl, timeout)
			return nil
		},
	}, &cobra.Command{
		Use:   "run",
		Short: "Request a new client certificate now and wait for it",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if seed == "" {
				return errors.New("--seed is required: take it from 'refresh-certs plan'")
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
