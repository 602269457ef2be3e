package integration

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/carousel-dev/carousel/test/framework"
)

// The policy under which the suites' managed API servers send their audit
// events to Carousel, the one docs/reference/cluster-api.md asks for. A
// request fails when its API server cannot store the event of the stage the
// request arrives in; a stopping kube-apiserver shuts its audit backend down
// before its long-running requests are done, and so failed a node proxy call
// arriving then. Here the backend refuses every event: a webhook that
// answers 500, in blocking-strict mode, which fails a request whose
// RequestReceived event it could not store, as a shut-down batch backend does.
var _ = Describe("The audit policy a managed API server runs under for the old-CA usage gate", func() {
	It("lets no request fail for want of an audit backend, and still sends a watch's start", func(ctx SpecContext) {
		var watchStarts, arrivals atomic.Int32
		refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var events auditv1.EventList
			if json.NewDecoder(r.Body).Decode(&events) == nil {
				for _, e := range events.Items {
					switch {
					case e.Stage == auditv1.StageRequestReceived:
						arrivals.Add(1)
					case e.Stage == auditv1.StageResponseStarted && e.Verb == "watch":
						watchStarts.Add(1)
					}
				}
			}
			http.Error(w, "refused", http.StatusInternalServerError)
		}))
		DeferCleanup(refusing.Close)

		dir := GinkgoT().TempDir()
		policy, kubeconfig := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit-webhook.kubeconfig")
		Expect(os.WriteFile(policy, []byte(framework.EveryRequestAuditPolicy), 0o600)).To(Succeed())
		Expect(os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: refusing, cluster: {server: "`+refusing.URL+`"}}]
users: [{name: api-server, user: {}}]
contexts: [{name: default, context: {cluster: refusing, user: api-server}}]
current-context: default
`), 0o600)).To(Succeed())
		// In blocking mode every request the API server makes of itself while
		// it starts waits for the refused webhook and its retries: beside the
		// e2e lane on two cores that took more than envtest's 20 s once.
		env := &envtest.Environment{ControlPlaneStartTimeout: 2 * time.Minute}
		Expect(framework.DieWithTestProcess(env, os.Getenv("KUBEBUILDER_ASSETS"), dir)).To(Succeed())
		env.ControlPlane.GetAPIServer().Configure().
			Set("audit-policy-file", policy).
			Set("audit-webhook-config-file", kubeconfig).
			Set("audit-webhook-mode", "blocking-strict").
			Set("audit-webhook-initial-backoff", "1ms")
		DeferCleanup(env.Stop) // before the start, which may fail half-way
		cfg, err := env.Start()
		Expect(err).NotTo(HaveOccurred(), "the API server could not serve its readiness checks")
		clientset, err := kubernetes.NewForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())

		By("writing, reading and watching while the backend refuses every event")
		cms := clientset.CoreV1().ConfigMaps(metav1.NamespaceDefault)
		watch, err := cms.Watch(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		defer watch.Stop()
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "audited"}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = cms.Get(ctx, "audited", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(watch.ResultChan()).Should(Receive())

		By("the API server having offered its events, the start of the watch among them, and none at a request's arrival")
		Eventually(watchStarts.Load).Should(BeNumerically(">", 0), "a watch is seen when it begins, not only when it ends")
		Expect(arrivals.Load()).To(BeZero())
	})
})
