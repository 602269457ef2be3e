package chart

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/operator"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/webhook/servingcert"
	"github.com/carousel-dev/carousel/test/framework"
	"github.com/carousel-dev/carousel/test/framework/hostcheck"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

const (
	release   = "carousel"
	namespace = "carousel-system"
	// serviceAccount is the chart's ServiceAccount, which the manager impersonates.
	serviceAccount = "system:serviceaccount:" + namespace + ":" + release
	webhookSecret  = release + "-webhook-cert"
)

var _ = Describe("The chart installed with helm on a real API server", Ordered, func() {
	var env *framework.Environment

	BeforeAll(func(ctx SpecContext) {
		work := GinkgoT().TempDir()
		// Registered before env.Stop, so it runs after it: the node is a real kubelet.
		hostcheck.ExpectUntouched()
		var err error
		env, err = framework.Start(ctx, framework.Options{
			RepoRoot: root, KubeBinDir: kubeAssets, CarouselBinDir: carouselBin, WorkDir: work,
			Namespace: "chart", Name: "helm", Pool: "workers", Nodes: 1,
			// No pod of the managed cluster calls its API server.
			WorkloadTrustReload: &metav1.Duration{},
			Logf: func(format string, args ...any) {
				GinkgoWriter.Printf(time.Now().Format("15:04:05 ")+format+"\n", args...)
			},
			Install: helmInstall,
		})
		DeferCleanup(env.Stop)
		Expect(err).NotTo(HaveOccurred(), "starting the environment; logs are in %s", work)
	}, NodeTimeout(5*time.Minute))

	It("takes a Cluster through a whole CA rotation with only the chart's permissions", func(ctx SpecContext) {
		// As NOTES.txt says: annotate to start, follow with the plugin, complete with the plugin.
		Expect(kubectl(ctx, env, "annotate", "clusters.carousel.dev", env.Name, "-n", env.Namespace, "carousel.dev/operation=start-ca-rotation")).To(ContainSubstring("annotated"))
		Eventually(func(ctx context.Context) (string, error) {
			return plugin(ctx, env, "rotation", "status", env.Name)
		}).WithContext(ctx).WithTimeout(4 * time.Minute).WithPolling(time.Second).Should(MatchRegexp(`Phase:\s+Prepared\n`))
		out, err := plugin(ctx, env, "rotation", "complete", env.Name, "--wait", "--timeout=4m")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(phase(ctx, env)).To(Equal(v1alpha1.RotationCompleted))

		// docs/how-to/recover-a-stuck-rotation.md: ask for a reconcile.
		Expect(kubectl(ctx, env, "annotate", "clusters.carousel.dev", env.Name, "-n", env.Namespace, "carousel.dev/operation=reconcile")).To(ContainSubstring("annotated"))
		Eventually(func(ctx context.Context) (map[string]string, error) {
			c := &v1alpha1.Cluster{}
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: env.Name}, c)
			return c.Annotations, err
		}).WithContext(ctx).WithTimeout(2 * time.Minute).ShouldNot(HaveKey(v1alpha1.OperationAnnotation))
	}, NodeTimeout(10*time.Minute))

	It("passes the checks of the install how-to", func(ctx SpecContext) {
		// docs/how-to/install-with-helm.md, step 3.
		for _, args := range [][]string{
			{"get", "validatingwebhookconfiguration", release, "-o", "jsonpath={.webhooks[*].clientConfig.caBundle}"},
			{"get", "lease", operator.LeaderElectionID, "-n", namespace, "-o", "jsonpath={.spec.holderIdentity}"},
		} {
			Expect(strings.TrimSpace(kubectl(ctx, env, args...))).NotTo(BeEmpty(), "kubectl %s", strings.Join(args, " "))
		}
	})

	It("passes helm test: its Pod proves that the webhook answers", func(ctx SpecContext) {
		type result struct {
			out string
			err error
		}
		tested := make(chan result, 1)
		go func() {
			out, err := helmContext(ctx, "test", release, "--namespace", namespace, "--kubeconfig="+env.ManagementKubeconfig, "--timeout", "2m")
			tested <- result{out, err}
		}()
		// No kubelet runs the management cluster's Pods here. The test is its kubelet: it runs the Pod's container,
		// the manager binary with the Pod's arguments as the Pod's ServiceAccount, and reports how it ended.
		pod := &corev1.Pod{}
		Eventually(func(ctx context.Context) error {
			return env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release + "-test-webhook"}, pod)
		}).WithContext(ctx).WithTimeout(2*time.Minute).Should(Succeed(), "helm test creates its Pod (its own timeout is 2m)")
		Expect(pod.Spec.Containers).To(HaveLen(1))
		container := pod.Spec.Containers[0]
		Expect(container.Image).To(HaveSuffix(":" + chartAppVersion()))
		as, err := impersonate(env.ManagementKubeconfig, filepath.Join(GinkgoT().TempDir(), "test.kubeconfig"),
			"system:serviceaccount:"+namespace+":"+pod.Spec.ServiceAccountName)
		Expect(err).NotTo(HaveOccurred())
		out, err := command(ctx, filepath.Join(carouselBin, "carousel-controller-manager"), append(container.Args, "--kubeconfig="+as)...).CombinedOutput()
		GinkgoWriter.Printf("%s", out)
		Expect(err).NotTo(HaveOccurred(), "the test Pod's container failed:\n%s", out)
		Expect(string(out)).To(ContainSubstring("the Cluster admission webhook answers"))
		pod.Status.Phase = corev1.PodSucceeded
		Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())

		var r result
		Eventually(tested).WithTimeout(2 * time.Minute).Should(Receive(&r))
		Expect(r.err).NotTo(HaveOccurred(), r.out)
		Expect(r.out).To(MatchRegexp(`TEST SUITE:\s+` + release + `-test-webhook`))
		Expect(r.out).To(MatchRegexp(`Phase:\s+Succeeded`))
	})

	It("issued its own webhook certificate and injected the CA bundle", func(ctx SpecContext) {
		secret := &corev1.Secret{}
		Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: webhookSecret}, secret)).To(Succeed())
		bundle, err := pki.ParseBundle(secret.Data[servingcert.KeyBundle])
		Expect(err).NotTo(HaveOccurred())

		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		Expect(env.Client.Get(ctx, client.ObjectKey{Name: release}, vwc)).To(Succeed())
		Expect(vwc.Webhooks).NotTo(BeEmpty())
		for _, w := range vwc.Webhooks {
			Expect(w.ClientConfig.CABundle).To(Equal(bundle.PEM()), "webhook %s", w.Name)
		}
		// The served certificate carries the Service's name, as in a cluster.
		served, err := pki.ParseCertificates(secret.Data[corev1.TLSCertKey])
		Expect(err).NotTo(HaveOccurred())
		_, err = served[0].Verify(x509.VerifyOptions{
			DNSName: release + "-webhook." + namespace + ".svc", Roots: bundle.CertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		Expect(err).NotTo(HaveOccurred())
	})

	It("serves its metrics only to a token allowed to get /metrics", func(ctx SpecContext) {
		// As a Prometheus would: a ServiceAccount token, bound (or not) to the chart's metrics-reader ClusterRole.
		kubectl(ctx, env, "create", "namespace", "monitoring")
		kubectl(ctx, env, "create", "serviceaccount", "prometheus", "-n", "monitoring")
		kubectl(ctx, env, "create", "serviceaccount", "stranger", "-n", "monitoring")
		kubectl(ctx, env, "create", "clusterrolebinding", "prometheus-carousel-metrics", "--clusterrole", release+"-metrics-reader",
			"--serviceaccount", "monitoring:prometheus")
		token := func(sa string) string {
			return strings.TrimSpace(kubectl(ctx, env, "create", "token", sa, "-n", "monitoring"))
		}
		scrape := func(token string) (int, string) {
			GinkgoHelper()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+env.OperatorMetricsAddress()+"/metrics", nil)
			Expect(err).NotTo(HaveOccurred())
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			// As the ServiceMonitor verifies it: the webhook's certificate, for the metrics Service's name, against
			// the webhook's CA bundle.
			secret := &corev1.Secret{}
			Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: webhookSecret}, secret)).To(Succeed())
			bundle, err := pki.ParseBundle(secret.Data[servingcert.KeyBundle])
			Expect(err).NotTo(HaveOccurred())
			verified := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
				RootCAs: bundle.CertPool(), ServerName: release + "-metrics." + namespace + ".svc", MinVersion: tls.VersionTLS12}}}
			resp, err := verified.Do(req)
			Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			Expect(err).NotTo(HaveOccurred())
			return resp.StatusCode, string(body)
		}
		code, _ := scrape("")
		Expect(code).To(Equal(http.StatusUnauthorized), "no token")
		// controller-runtime's filter answers 500 "Authentication failed" when the TokenReview says why it refused.
		code, body := scrape("not-a-token")
		Expect(code).To(Equal(http.StatusInternalServerError), "a token the API server does not know")
		Expect(body).To(Equal("Authentication failed\n"))
		code, _ = scrape(token("stranger"))
		Expect(code).To(Equal(http.StatusForbidden), "a ServiceAccount without the metrics-reader role")
		code, body = scrape(token("prometheus"))
		Expect(code).To(Equal(http.StatusOK))
		Expect(body).To(ContainSubstring("carousel_ca_expiry_timestamp_seconds{"))
	})

	It("was never refused a request", func() {
		log, err := os.ReadFile(filepath.Join(env.WorkDir, "carousel-controller-manager.log"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(log)).NotTo(ContainSubstring("forbidden"))
		Expect(string(log)).To(ContainSubstring("injected the CA bundle"))
	})

	// Last: the webhook goes back to its Service, which this API server cannot reach: its address, in the API
	// server's service range, is routed off this machine. The specs that have helm render it (their upgrades need
	// the Service form) touch no Cluster; the last of them, or one that fails, points it back at the manager's
	// loopback port when it ends, so that no admission request of the manager's leaves the machine afterwards.
	var loopbackWebhook string
	backToLoopback := func(ctx SpecContext) { Expect(pointWebhookAt(ctx, env.Client, loopbackWebhook)).To(Succeed()) }
	It("keeps the injected CA bundle through helm upgrade", func(ctx SpecContext) {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		Expect(env.Client.Get(ctx, client.ObjectKey{Name: release}, vwc)).To(Succeed())
		injected := vwc.Webhooks[0].ClientConfig.CABundle
		Expect(injected).NotTo(BeEmpty())
		// Undo the loopback URL of helmInstall, so that only helm changes the configuration.
		DeferCleanup(func(ctx SpecContext) {
			if CurrentSpecReport().Failed() { // the specs after it do not run
				backToLoopback(ctx)
			}
		})
		for i := range vwc.Webhooks {
			u, err := url.Parse(*vwc.Webhooks[i].ClientConfig.URL)
			Expect(err).NotTo(HaveOccurred())
			loopbackWebhook = u.Scheme + "://" + u.Host
			vwc.Webhooks[i].ClientConfig.URL = nil
			vwc.Webhooks[i].ClientConfig.Service = &admissionregistrationv1.ServiceReference{
				Namespace: namespace, Name: release + "-webhook", Path: ptr.To(u.Path), Port: ptr.To[int32](443),
			}
		}
		Expect(env.Client.Update(ctx, vwc)).To(Succeed())

		out, err := helm("upgrade", release, chartDir, "--namespace", namespace, "--kubeconfig="+env.ManagementKubeconfig,
			"--reuse-values", "--set", "webhook.timeoutSeconds=5")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(env.Client.Get(ctx, client.ObjectKey{Name: release}, vwc)).To(Succeed())
		Expect(*vwc.Webhooks[0].TimeoutSeconds).To(BeEquivalentTo(5), "the upgrade did not apply")
		Expect(vwc.Webhooks[0].ClientConfig.CABundle).To(Equal(injected))
	})

	// After the one above, whose upgrade points the webhook at its Service again, as helm renders it.
	It("refuses to stop installing CRDs it would delete, and with them every Cluster", func(ctx SpecContext) {
		DeferCleanup(backToLoopback)
		kubeconfig := "--kubeconfig=" + env.ManagementKubeconfig
		crdThere := func(ctx context.Context) error {
			crd := &metav1.PartialObjectMetadata{}
			crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
			return env.Client.Get(ctx, client.ObjectKey{Name: "clusters.carousel.dev"}, crd)
		}
		out, err := helm("upgrade", release, chartDir, "--namespace", namespace, kubeconfig, "--reuse-values", "--set", "crds.keep=false")
		Expect(err).NotTo(HaveOccurred(), out)

		By("turning the CRDs off while they lack helm.sh/resource-policy: keep: refused")
		out, err = helm("upgrade", release, chartDir, "--namespace", namespace, kubeconfig, "--reuse-values", "--set", "crds.enabled=false")
		Expect(err).To(MatchError(ContainSubstring("upgrade with crds.keep=true first")), out)
		Expect(crdThere(ctx)).To(Succeed())
		Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: env.Name}, &v1alpha1.Cluster{})).To(Succeed(), "the Cluster is still there")

		By("with crds.keep=true first: allowed, and helm leaves the CRDs and the Cluster in place")
		out, err = helm("upgrade", release, chartDir, "--namespace", namespace, kubeconfig, "--reuse-values", "--set", "crds.keep=true")
		Expect(err).NotTo(HaveOccurred(), out)
		out, err = helm("upgrade", release, chartDir, "--namespace", namespace, kubeconfig, "--reuse-values", "--set", "crds.enabled=false")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(crdThere(ctx)).To(Succeed())
		Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: env.Name}, &v1alpha1.Cluster{})).To(Succeed(), "the Cluster is still there")
	})
})

func phase(ctx context.Context, e *framework.Environment) v1alpha1.CARotationPhase {
	return kit.GetCluster(ctx, e.Client, client.ObjectKey{Namespace: e.Namespace, Name: e.Name}).CARotationPhase()
}

// kubectl runs the test control plane's kubectl against the management
// cluster and returns its output.
func kubectl(ctx context.Context, e *framework.Environment, args ...string) string {
	GinkgoHelper()
	out, err := command(ctx, filepath.Join(kubeAssets, "kubectl"), append(args, "--kubeconfig="+e.ManagementKubeconfig)...).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))
	return string(out)
}

// helmInstall installs the chart as a user would, then returns how to run the
// controller manager: with the arguments the chart gives its container, as the
// chart's ServiceAccount. The API server runs outside any cluster network, so
// the webhook is reached on loopback instead of through its Service.
func helmInstall(ctx context.Context, e *framework.Environment) (framework.OperatorRun, error) {
	kubeconfig := "--kubeconfig=" + e.ManagementKubeconfig
	// The environment's platform and node agents renew within a second.
	out, err := helm("install", release, chartDir, "--namespace", namespace, "--create-namespace", kubeconfig,
		"--set", "controller.managedPollInterval=1s", "--set", "controller.apiServiceResync=2s")
	GinkgoWriter.Print(out)
	if err != nil {
		return framework.OperatorRun{}, err
	}
	manifest, err := helm("get", "manifest", release, "--namespace", namespace, kubeconfig)
	if err != nil {
		return framework.OperatorRun{}, err
	}
	args, err := managerArgs(manifest)
	if err != nil {
		return framework.OperatorRun{}, err
	}

	ports := map[string]int{}
	for _, name := range []string{"webhook", "metrics", "health"} {
		if ports[name], err = framework.FreePort(); err != nil {
			return framework.OperatorRun{}, err
		}
	}
	if err := pointWebhookAt(ctx, e.Client, "https://localhost:"+strconv.Itoa(ports["webhook"])); err != nil {
		return framework.OperatorRun{}, err
	}
	impersonating, err := impersonate(e.ManagementKubeconfig, filepath.Join(e.WorkDir, "service-account.kubeconfig"), serviceAccount)
	if err != nil {
		return framework.OperatorRun{}, err
	}
	args, err = override(args, map[string]string{
		"--metrics-bind-address":      "127.0.0.1:" + strconv.Itoa(ports["metrics"]),
		"--health-probe-bind-address": "127.0.0.1:" + strconv.Itoa(ports["health"]),
		"--webhook-port":              strconv.Itoa(ports["webhook"]),
	})
	if err != nil {
		return framework.OperatorRun{}, err
	}
	for i, a := range args {
		if strings.HasPrefix(a, "--webhook-dns-names=") {
			args[i] = a + ",localhost"
		}
	}
	args = append(args, "--webhook-host=127.0.0.1", "--kubeconfig="+impersonating)
	GinkgoWriter.Printf("controller manager arguments: %s\n", strings.Join(args, " "))
	return framework.OperatorRun{Args: args, WebhookAddress: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports["webhook"]))}, nil
}

// managerArgs returns the arguments of the manager container of the rendered
// Deployment.
func managerArgs(manifest string) ([]string, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return nil, errors.New("the chart renders no Deployment")
		} else if err != nil {
			return nil, err
		}
		if u.GetKind() != "Deployment" {
			continue
		}
		d := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d); err != nil {
			return nil, err
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == "manager" {
				return c.Args, nil
			}
		}
		return nil, errors.New("the Deployment has no manager container")
	}
}

// override replaces the values of flags the chart sets; a flag it does not set
// is an error, since the chart should set each of them.
func override(args []string, values map[string]string) ([]string, error) {
	out := append([]string(nil), args...)
	for flag, value := range values {
		found := false
		for i, a := range out {
			if strings.HasPrefix(a, flag+"=") {
				out[i], found = flag+"="+value, true
			}
		}
		if !found {
			return nil, fmt.Errorf("the chart does not set %s", flag)
		}
	}
	return out, nil
}

// pointWebhookAt replaces the webhook's Service reference with a URL.
func pointWebhookAt(ctx context.Context, c client.Client, server string) error {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: release}, vwc); err != nil {
		return err
	}
	for i := range vwc.Webhooks {
		if vwc.Webhooks[i].ClientConfig.Service == nil {
			continue // at a URL already
		}
		path := ptr.Deref(vwc.Webhooks[i].ClientConfig.Service.Path, "")
		vwc.Webhooks[i].ClientConfig.Service = nil
		vwc.Webhooks[i].ClientConfig.URL = ptr.To(server + path)
	}
	return c.Update(ctx, vwc)
}

// impersonate writes a copy of an admin kubeconfig that acts as the chart's
// ServiceAccount.
func impersonate(adminKubeconfig, path, user string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(adminKubeconfig)
	if err != nil {
		return "", err
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = user
	}
	return path, clientcmd.WriteToFile(*cfg, path)
}

// plugin runs kubectl-carousel against the management cluster.
func plugin(ctx context.Context, e *framework.Environment, args ...string) (string, error) {
	args = append(args, "--kubeconfig="+e.ManagementKubeconfig, "--namespace="+e.Namespace)
	out, err := command(ctx, filepath.Join(carouselBin, "kubectl-carousel"), args...).CombinedOutput()
	GinkgoWriter.Print(string(out))
	return string(out), err
}

// chartAppVersion is the chart's appVersion, the tag of its default image.
func chartAppVersion() string {
	GinkgoHelper()
	raw, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	Expect(err).NotTo(HaveOccurred())
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	Expect(sigsyaml.Unmarshal(raw, &chart)).To(Succeed())
	return chart.AppVersion
}
