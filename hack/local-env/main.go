// Command local-env is `make run`: it starts the local environment of the
// e2e suites (a management API server, the Carousel controller manager, a
// managed cluster running on Carousel's certificates, and real kubelets with
// the node agent beside each, in a network namespace of their own; or, with
// --stand-in-nodes, node agents in their stand-in mode on loopback), prints
// how to drive a CA rotation, shows phase changes as they happen, and stops
// everything on Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/test/framework"
)

func main() {
	root, _ := os.Getwd()
	workDir := flag.String("work-dir", filepath.Join(root, "bin", "local-env"), "Directory for kubeconfigs, credentials, data and logs; emptied at start.")
	nodes := flag.Int("nodes", 3, "Number of nodes.")
	standIn := flag.Bool("stand-in-nodes", false, "Run each node as a node agent in its stand-in mode (no kubelet) on loopback.")
	flag.Parse()
	if err := run(root, *workDir, *nodes, *standIn); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(root, workDir string, nodes int, standIn bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.RemoveAll(workDir); err != nil {
		return err
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return fmt.Errorf("KUBEBUILDER_ASSETS is not set: start it with `make run`")
	}
	say := func(format string, args ...any) { fmt.Printf(time.Now().Format("15:04:05 ")+format+"\n", args...) }
	env, err := framework.Start(ctx, framework.Options{
		RepoRoot: root, KubeBinDir: assets, CarouselBinDir: filepath.Join(root, "bin"), WorkDir: workDir,
		Namespace: "carousel", Name: "demo", Pool: "workers", Nodes: nodes, StandInNodes: standIn, Logf: say,
	})
	defer func() {
		say("stopping every process")
		env.Stop()
	}()
	if err != nil && ctx.Err() != nil {
		// Ctrl-C while it started: what failed is what the signal ended.
		return nil
	}
	if err != nil {
		return fmt.Errorf("starting the environment (logs in %s): %w", workDir, err)
	}
	managed := filepath.Join(workDir, "managed-admin.kubeconfig")
	if err := writeManagedKubeconfig(ctx, env, managed); err != nil {
		return err
	}
	kubectl := filepath.Join(assets, "kubectl")
	cluster := fmt.Sprintf("clusters.carousel.dev/%s -n %s", env.Name, env.Namespace)
	fmt.Printf(`
Carousel is running; logs are in %[1]s. The management cluster and the managed
API server listen on 127.0.0.1 (the latter forwarded into the managed cluster's
network namespace, where its kubelets listen on 192.0.2.x).

  management cluster:  export KUBECONFIG=%[2]s
  managed cluster:     %[3]s  (admin; rewritten when Carousel rotates it)

  watch:     %[4]s get clusters.carousel.dev -n %[5]s -w
  start:     %[4]s annotate %[6]s carousel.dev/operation=start-ca-rotation
  complete:  %[4]s annotate %[6]s carousel.dev/operation=complete-ca-rotation   (once Prepared, and condition OldCAsUnused is True)
  nodes:     %[4]s --kubeconfig %[3]s get nodes
  metrics:   %[4]s --kubeconfig %[3]s top nodes   (through the aggregator and metrics-server)
`, workDir, env.ManagementKubeconfig, managed, kubectl, env.Namespace, cluster)
	if env.ControlPlane.Tunnel {
		fmt.Printf(`  tunnel:    nsenter --net=%s curl -s %s | grep ^konnectivity_network_proxy_server
             (node proxy and metrics go through konnectivity; the VPN role's certificates)
`, env.Netns.Path(), framework.TunnelServerMetrics(0))
	}
	fmt.Print("\nPress Ctrl-C to stop and clean up.\n\n")

	var phase v1alpha1.CARotationPhase
	var reason string
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
		c := &v1alpha1.Cluster{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(env.Cluster), c); err != nil {
			continue
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCARotation)
		if c.CARotationPhase() != phase || (cond != nil && cond.Reason != reason) {
			phase = c.CARotationPhase()
			if cond != nil {
				reason = cond.Reason
				say("phase %q: %s", phase, cond.Message)
			}
			if err := writeManagedKubeconfig(ctx, env, managed); err != nil {
				say("rewriting %s: %v", managed, err)
			}
		}
	}
}

func writeManagedKubeconfig(ctx context.Context, env *framework.Environment, path string) error {
	s := &corev1.Secret{}
	key := client.ObjectKey{Namespace: env.Namespace, Name: credentials.CertificateSecretName(env.Name, credentials.CertAdmin)}
	if err := env.Client.Get(ctx, key, s); err != nil {
		return err
	}
	return os.WriteFile(path, s.Data[v1alpha1.DataKeyKubeconfig], 0o600)
}
