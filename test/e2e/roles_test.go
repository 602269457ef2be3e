package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// roleCheck is a request that depends on TLS handshakes with certificates of
// roles: it fails if one of them is not trusted by its peer.
type roleCheck struct {
	roles []v1alpha1.CARole
	// what says what the request goes through.
	what  string
	check func(ctx context.Context, admin kubernetes.Interface) error
}

// roleChecks are the checks of the local environment, each made with the
// admin credential Carousel publishes now.
func roleChecks() []roleCheck {
	checks := []roleCheck{{
		roles: []v1alpha1.CARole{v1alpha1.CARoleCluster, v1alpha1.CARoleClient, v1alpha1.CARoleEtcd},
		what:  "a write through the API server (its serving certificate, the admin client certificate) to etcd (the API server's etcd client and etcd's serving certificates)",
		check: writeThrough,
	}}
	if env == nil {
		return checks
	}
	checks[0].what += ", and etcd's JSON gateway (etcd's serving certificate as the client of its own gRPC server)"
	checks[0].check = func(ctx context.Context, admin kubernetes.Interface) error {
		if err := writeThrough(ctx, admin); err != nil {
			return err
		}
		return env.ControlPlane.EtcdGatewayServes(ctx)
	}
	kubelet := roleCheck{
		roles: []v1alpha1.CARole{v1alpha1.CARoleKubelet},
		what:  "API server -> every running kubelet through the node proxy (the API server's kubelet client and the kubelets' serving certificates)",
		check: proxyToKubelets,
	}
	if tunnelRuns() {
		kubelet.roles = append(kubelet.roles, v1alpha1.CARoleVPN)
		kubelet.what += ", through the tunnel: konnectivity-server (its vpn-server certificate from the VPN bundle) -> agents (their vpn-client certificate)"
		kubelet.check = func(ctx context.Context, admin kubernetes.Interface) error {
			if err := proxyToKubelets(ctx, admin); err != nil {
				return err
			}
			return tunnelCarried(ctx)
		}
	}
	checks = append(checks, kubelet)
	if metricsServerRuns() {
		checks = append(checks, roleCheck{
			roles: []v1alpha1.CARole{v1alpha1.CARoleFrontProxy, v1alpha1.CARoleMetricsServer},
			what: "the aggregator -> metrics-server (the API server's front-proxy client certificate, metrics-server's serving certificate " +
				"from the metrics-server bundle) -> every running kubelet's metrics",
			check: func(ctx context.Context, admin kubernetes.Interface) error {
				served, err := servedCertificate(ctx, env.ControlPlane.MetricsServerAddress())
				if err != nil {
					return err
				}
				if err := pki.Verify(served, bundle(ctx, v1alpha1.CARoleMetricsServer), x509.ExtKeyUsageServerAuth, time.Now()); err != nil {
					return fmt.Errorf("metrics-server's certificate: %w", err)
				}
				names, err := nodeMetrics(ctx, admin)
				if err != nil {
					return err
				}
				for _, n := range runningKubelets() {
					if !slices.Contains(names, n.Name) {
						return fmt.Errorf("no metrics of node %s yet (metrics of %v)", n.Name, names)
					}
				}
				return nil
			},
		})
	}
	return checks
}

// proxyToKubelets asks every running kubelet for its health through the
// API server's node proxy.
func proxyToKubelets(ctx context.Context, admin kubernetes.Interface) error {
	for _, n := range runningKubelets() {
		if _, err := admin.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n.Name, "proxy", "healthz").DoRaw(ctx); err != nil {
			return fmt.Errorf("kubelet %s: %w", n.Name, err)
		}
	}
	return nil
}

// tunnelCarried checks that every tunnel server serves a certificate from
// the VPN bundle and has dialled through its agents: the servers restart
// with their API servers in each phase, so what they dialled since went
// through agents that connected with the current certificates.
func tunnelCarried(ctx context.Context) error {
	for _, address := range env.ControlPlane.TunnelServerAddresses() {
		served, err := servedCertificate(ctx, address)
		if err != nil {
			return fmt.Errorf("tunnel server %s: %w", address, err)
		}
		if err := pki.Verify(served, bundle(ctx, v1alpha1.CARoleVPN), x509.ExtKeyUsageServerAuth, time.Now()); err != nil {
			return fmt.Errorf("tunnel server %s's certificate: %w", address, err)
		}
	}
	if dials := env.ControlPlane.TunnelDials(ctx); dials == 0 {
		return fmt.Errorf("the tunnel servers dialled nothing: the node proxy did not go through the tunnel")
	}
	return nil
}

// tunnelRuns reports whether the environment runs the konnectivity tunnel.
func tunnelRuns() bool { return env != nil && env.ControlPlane.Tunnel }

// writeThrough updates a ConfigMap: a write reaches etcd.
func writeThrough(ctx context.Context, admin kubernetes.Interface) error {
	cms := admin.CoreV1().ConfigMaps(metav1.NamespaceDefault)
	data := map[string]string{"at": time.Now().Format(time.RFC3339Nano)}
	cm, err := cms.Get(ctx, "carousel-e2e-roles", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "carousel-e2e-roles"}, Data: data}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	cm.Data = data
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

// roleCheckpoints records, for each checkpoint of the journey (before the
// rotation, Prepared, Completed), which roles' checks passed.
type roleCheckpoints struct {
	checkpoints []string
	passed      map[v1alpha1.CARole][]string
}

// check runs every role check, each until it passes (a restarted
// metrics-server has node metrics only after two scrapes), and records the
// roles at checkpoint.
func (r *roleCheckpoints) check(ctx context.Context, checkpoint string) {
	GinkgoHelper()
	r.checkpoints = append(r.checkpoints, checkpoint)
	admin := clientFor(adminKubeconfig(ctx))
	for _, c := range roleChecks() {
		Eventually(func() error { return c.check(ctx, admin) }).WithTimeout(time.Minute).WithPolling(time.Second).
			Should(Succeed(), "%s: %s", checkpoint, c.what)
		for _, role := range c.roles {
			r.passed[role] = append(r.passed[role], checkpoint)
		}
	}
}

// exercised returns how many roles passed at every checkpoint, and a line
// on each role that did not.
func (r *roleCheckpoints) exercised() (int, []string) {
	n := 0
	var missing []string
	for _, role := range v1alpha1.CARoles() {
		if slices.Equal(r.passed[role], r.checkpoints) {
			n++
			continue
		}
		missing = append(missing, fmt.Sprintf("%s: checked at %s of %s", role, orNone(r.passed[role]), strings.Join(r.checkpoints, ", ")))
	}
	return n, missing
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
