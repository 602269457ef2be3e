package integration

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/auditwebhook"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/oldca"
	"github.com/carousel-dev/carousel/pkg/operator"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/test/framework"
)

// The old-CA usage gate, on a real managed API server whose audit webhook
// backend sends its events to the receiver the suite's webhook server
// serves: clients that followed Carousel's protocol never hold it up (a
// kubeconfig kubectl carousel issued before the rotation does, by name,
// until its user takes a new one), and two that did not (a robot with a
// certificate someone signed from the old client CA, and an admin
// kubeconfig signed like kubectl carousel's from before the rotation, of
// which the plugin keeps no record) refuse complete-ca-rotation by name
// until they stop, or until it is forced, after which the API server
// refuses them.
var _ = Describe("The old-CA usage gate", Ordered, func() {
	var (
		c     *v1alpha1.Cluster
		key   client.ObjectKey
		robot *rest.Config // signed from the old client CA by hand: Carousel issues this user nothing
		// signed is a client certificate for user from the current client CA, by hand.
		signed func(ctx context.Context, user string) *rest.Config
		// issuedKubeconfigs is the record of the kubeconfigs kubectl carousel issued.
		issuedKubeconfigs func(context.Context) []oldca.IssuedCertificate
		alice             *rest.Config // what kubectl carousel kubeconfig signed before the rotation
		writes            atomic.Int64
		users             []func() // stop the clients in use
	)
	const window = 15 * time.Second

	// use makes one request as cfg, which the API server audits. It makes no
	// assertion: keepUsing runs it in a goroutine of its own, whose context
	// ends when the client stops, a read in flight with it.
	use := func(ctx context.Context, cfg *rest.Config) error {
		bundle := &corev1.ConfigMap{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, v1alpha1.CARoleCluster)}, bundle); err != nil {
			return err
		}
		cfg = rest.CopyConfig(cfg)
		cfg.CAData = []byte(bundle.Data[v1alpha1.DataKeyCABundle]) // the server certificate moves to the new cluster CA
		clients, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		_, err = clients.Discovery().ServerVersion()
		return err
	}
	usage := func(ctx context.Context) *v1alpha1.OldCAUsage {
		return getCluster(ctx, key).CARotation().OldCAUsage
	}
	issuedKubeconfigs = func(ctx context.Context) []oldca.IssuedCertificate {
		GinkgoHelper()
		cm := &corev1.ConfigMap{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: credentials.IssuedKubeconfigsConfigMapName(key.Name)}, cm)).To(Succeed())
		Expect(metav1.IsControlledBy(cm, c)).To(BeTrue(), "the record goes with its Cluster")
		record, err := oldca.ParseKubeconfigs(cm.Data[oldca.KubeconfigsDataKey])
		Expect(err).NotTo(HaveOccurred())
		return record.Issued
	}
	// recordedUsers are the users of the client certificates the usage
	// record holds.
	recordedUsers := func(ctx context.Context) ([]string, error) {
		cm := &corev1.ConfigMap{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: credentials.CertificateUsageConfigMapName(key.Name)}, cm); err != nil {
			return nil, err
		}
		u, err := oldca.Parse(cm.Data[oldca.DataKey])
		if err != nil {
			return nil, err
		}
		var users []string
		for _, cred := range u.Credentials {
			users = append(users, cred.User)
		}
		return users, nil
	}
	// record is the usage record, for the failure messages.
	record := func(ctx context.Context) string {
		cm := &corev1.ConfigMap{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: credentials.CertificateUsageConfigMapName(key.Name)}, cm); err != nil {
			return err.Error()
		}
		rot := getCluster(ctx, key).CARotation()
		return fmt.Sprintf("%s (started %s, prepared %s)", cm.Data[oldca.DataKey], rot.LastInitiationTime, rot.LastInitiationFinishedTime)
	}

	BeforeAll(func(ctx SpecContext) {
		ns := newNamespace(ctx)
		hook := &testEnv.WebhookInstallOptions
		caFile := filepath.Join(GinkgoT().TempDir(), "webhook-ca.crt")
		Expect(os.WriteFile(caFile, hook.LocalServingCAData, 0o600)).To(Succeed())
		startControllersWith(ns, &writes, func(o *operator.Options) {
			o.AuditWebhookURL = "https://" + net.JoinHostPort(hook.LocalServingHost, strconv.Itoa(hook.LocalServingPort)) + "/audit"
			o.AuditWebhookCAFile = caFile
			o.OldCAUsageWindow = window
		})
		port, err := framework.FreePort()
		Expect(err).NotTo(HaveOccurred())
		// kube-controller-manager publishes kube-root-ca.crt, which Prepared waits for.
		cp := &framework.ManagedControlPlane{BinDir: os.Getenv("KUBEBUILDER_ASSETS"), Dir: GinkgoT().TempDir(), APIServerPort: port, ControllerManager: true, AuditWebhook: true}
		c = &v1alpha1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gated"},
			Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3", ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: cp.Endpoint()},
				CARotation: v1alpha1.CARotationSettings{WorkloadTrustReload: &metav1.Duration{}}},
		}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		key = client.ObjectKeyFromObject(c)
		c = waitForReady(ctx, key)

		By("giving the Cluster a kubeconfig for its API server's audit webhook backend")
		secret := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: credentials.AuditWebhookSecretName(c.Name)}, secret)).To(Succeed())
		kubeconfig, err := clientcmd.Load(secret.Data[v1alpha1.DataKeyKubeconfig])
		Expect(err).NotTo(HaveOccurred())
		server := kubeconfig.Clusters[kubeconfig.Contexts[kubeconfig.CurrentContext].Cluster].Server
		Expect(server).To(HaveSuffix("/audit/" + ns + "/gated"))
		Expect(secret.Data[auditwebhook.DataKeyToken]).To(HaveLen(43)) // 32 random bytes
		Expect(metav1.IsControlledBy(secret, c)).To(BeTrue())

		runControlPlane(ctx, c, cp)

		By("signing two client certificates from the client CA outside Carousel's certificate Secrets")
		signed = func(ctx context.Context, user string) *rest.Config {
			clientCA := loadCAs(ctx, c)[v1alpha1.CARoleClient].Current
			kp, err := clientCA.IssueKeyPair(pki.LeafTemplate{CommonName: user, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Hour},
				pki.KeyAlgorithm(c.Spec.Certificates.KeyAlgorithmOrDefault()), time.Now())
			Expect(err).NotTo(HaveOccurred())
			keyPEM, err := kp.KeyPEM()
			Expect(err).NotTo(HaveOccurred())
			return &rest.Config{Host: cp.Endpoint(), TLSClientConfig: rest.TLSClientConfig{CertData: kp.CertPEM(), KeyData: keyPEM}}
		}
		robot, alice = signed(ctx, "ci-robot"), signed(ctx, "carousel:admin:alice")
		Expect(use(ctx, alice)).To(Succeed()) // the robot's first request comes after the start

		By("handing bob an admin kubeconfig with kubectl carousel, which records it")
		_, err = kubectlCarousel(ctx, "kubeconfig", key.Name, "-n", key.Namespace, "--name", "bob", "--ttl", "1h")
		Expect(err).NotTo(HaveOccurred())
		issued := issuedKubeconfigs(ctx)
		Expect(issued).To(HaveLen(1))
		Expect(issued[0].User).To(Equal("carousel:admin:bob"))
		Expect(issued[0].Issuer).To(Equal(hex.EncodeToString(loadCAs(ctx, c)[v1alpha1.CARoleClient].Current.Cert.SubjectKeyId)))
		Expect(issued[0].NotAfter.Sub(issued[0].IssuedAt)).To(BeNumerically("~", time.Hour, 2*time.Second))
	})

	// keepUsing has cfg make a request every half second until the returned
	// function is called, as a client in use does (errors are left to the
	// specs: the API server restarts in the phases).
	keepUsing := func(cfg *rest.Config) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for tick := time.NewTicker(500 * time.Millisecond); ; {
				_ = use(ctx, cfg)
				select {
				case <-ctx.Done():
					tick.Stop()
					return
				case <-tick.C:
				}
			}
		}()
		var once sync.Once
		stop = func() { once.Do(func() { cancel(); <-done }) }
		users = append(users, stop) // a DeferCleanup here would end with the spec
		return stop
	}
	var stopAlice func()
	AfterAll(func() {
		for _, stop := range users {
			stop()
		}
	})

	It("records the client certificates the API server sees in use, from its audit events", func(ctx SpecContext) {
		// Carousel's own client, and the kubeconfig signed by hand.
		Eventually(recordedUsers).WithContext(ctx).WithTimeout(2 * time.Minute).Should(ContainElements("carousel:admin:alice", "carousel:operator"))
	})

	It("lets nothing that followed the protocol hold up a completion", func(ctx SpecContext) {
		Expect(annotate(ctx, c, v1alpha1.OperationStartCARotation)).To(Succeed())
		waitForPhaseSlowly(ctx, key, v1alpha1.RotationPrepared)

		By("bob's kubeconfig from before the rotation is named until he takes a new one")
		Eventually(func(g Gomega) {
			g.Expect(usage(ctx)).NotTo(BeNil())
			g.Expect(usage(ctx).Dependents).To(ContainElement(SatisfyAll(
				HaveField("Kind", v1alpha1.OldCADependentKubeconfig), HaveField("Name", "carousel:admin:bob"),
				HaveField("Message", ContainSubstring("issue it a new one with --name bob")))))
		}).Should(Succeed())
		_, err := kubectlCarousel(ctx, "kubeconfig", key.Name, "-n", key.Namespace, "--name", "bob", "--ttl", "1h")
		Expect(err).NotTo(HaveOccurred())
		newClientCA := hex.EncodeToString(loadCAs(ctx, c)[v1alpha1.CARoleClient].Current.Cert.SubjectKeyId)
		Expect(issuedKubeconfigs(ctx)).To(HaveExactElements(HaveField("Issuer", Not(Equal(newClientCA))), HaveField("Issuer", newClientCA)))

		Eventually(func(g Gomega) {
			u := usage(ctx)
			g.Expect(u).NotTo(BeNil())
			g.Expect(u.AuditEventsReceived).To(BeTrue())
			g.Expect(u.Total).To(BeZero(), "the clients Carousel renewed in Preparing, and the hand-signed ones not used since Prepared: %+v", u.Dependents)
		}).WithTimeout(oldca.Settling+time.Minute).Should(Succeed(), "once the audit events of the first minute after Prepared are in")
		cond := meta.FindStatusCondition(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionOldCAsUnused)
		Expect(cond).NotTo(BeNil())
		Expect(cond.Status).To(Equal(metav1.ConditionTrue))
	})

	It("names the clients that still use old-CA certificates, and refuses the completion", func(ctx SpecContext) {
		Expect(use(ctx, robot)).To(Succeed())
		keepUsing(robot)
		stopAlice = keepUsing(alice)
		Eventually(func(g Gomega) {
			u := usage(ctx)
			g.Expect(u.Total).To(BeEquivalentTo(2), "the gate %+v from the record %s", u, record(ctx))
			g.Expect(u.Dependents).To(HaveLen(2))
			g.Expect(u.Dependents[0].Name).To(Equal("carousel:admin:alice"))
			g.Expect(u.Dependents[0].Message).To(ContainSubstring("in use before the rotation started, so the old client CA signed it"))
			g.Expect(u.Dependents[1].Name).To(Equal("ci-robot"))
			g.Expect(u.Dependents[1].Message).To(ContainSubstring("Carousel issues this user none from the new client CA"))
			g.Expect(u.Dependents[1].LastSeen).NotTo(BeNil())
		}).Should(Succeed())
		cond := meta.FindStatusCondition(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionOldCAsUnused)
		Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		Expect(cond.Reason).To(Equal(v1alpha1.ReasonOldCADependents))

		err := annotate(ctx, getCluster(ctx, key), v1alpha1.OperationCompleteCARotation)
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("2 clients still depend on the old CAs: User carousel:admin:alice, User ci-robot; " +
			"completing the rotation now would lock them out"))
		Expect(err.Error()).To(ContainSubstring("or complete anyway with carousel.dev/operation=complete-ca-rotation=force"))

		out, err := kubectlCarousel(ctx, "rotation", "status", key.Name, "-n", key.Namespace)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("Old CAs:"))
		Expect(out).To(MatchRegexp(`User ci-robot +\d{4}-\d\d-\d\dT[0-9:]+Z +authenticates with a client certificate`))
	})

	It("lets a client go once it has not been seen for the window", func(ctx SpecContext) {
		stopAlice()
		Eventually(func(g Gomega) {
			u := usage(ctx)
			g.Expect(u.Total).To(BeEquivalentTo(1), "the gate %+v from the record %s", u, record(ctx))
			g.Expect(u.Dependents[0].Name).To(Equal("ci-robot"))
		}).WithTimeout(window + oldca.Settling + time.Minute).WithPolling(time.Second).Should(Succeed())
	})

	// startedRecord is the Cluster's record name, which the rotation's start
	// recorded (the UID kept tells).
	startedRecord := func(ctx context.Context, name string, kept func(*v1alpha1.CARotation) types.UID) *corev1.ConfigMap {
		GinkgoHelper()
		started := &corev1.ConfigMap{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, started)).To(Succeed())
		Expect(kept(getCluster(ctx, key).CARotation())).To(Equal(started.UID), "the start recorded the record it judges by")
		return started
	}

	It("does not vouch for the rotation once the usage record it started with is deleted", func(ctx SpecContext) {
		started := startedRecord(ctx, credentials.CertificateUsageConfigMapName(key.Name), func(rot *v1alpha1.CARotation) types.UID { return rot.UsageRecordUID })
		usageKey := client.ObjectKeyFromObject(started)

		By("deleting the record: the robot's requests have the receiver create it again, without the first uses it held")
		Expect(k8s.Delete(ctx, started)).To(Succeed())
		Eventually(func(g Gomega) {
			again := &corev1.ConfigMap{}
			g.Expect(k8s.Get(ctx, usageKey, again)).To(Succeed())
			g.Expect(again.UID).NotTo(Equal(started.UID))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		Eventually(func(g Gomega) {
			u := usage(ctx)
			g.Expect(u.Dependents).To(ContainElements(
				SatisfyAll(HaveField("Kind", v1alpha1.OldCADependentCluster), HaveField("Name", "client-certificate-usage"),
					HaveField("Message", ContainSubstring("as it was when the rotation started, was deleted since"))),
				HaveField("Name", "ci-robot")), "the gate %+v from the record %s", u, record(ctx))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		err := annotate(ctx, getCluster(ctx, key), v1alpha1.OperationCompleteCARotation)
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("Cluster client-certificate-usage"))
	})

	It("reads the kubeconfig record it started with when it lost its label, and does not vouch for its kubeconfigs once it is deleted", func(ctx SpecContext) {
		started := startedRecord(ctx, credentials.IssuedKubeconfigsConfigMapName(key.Name), func(rot *v1alpha1.CARotation) types.UID { return rot.KubeconfigRecordUID })

		By("taking the record's label, which hides it from the manager's cache, and recording in it a kubeconfig of carol's from the old client CA")
		record, err := oldca.ParseKubeconfigs(started.Data[oldca.KubeconfigsDataKey])
		Expect(err).NotTo(HaveOccurred())
		now := time.Now()
		record.Issued = append(record.Issued, oldca.IssuedCertificate{User: "carousel:admin:carol", Fingerprint: strings.Repeat("cd", sha256.Size),
			Issuer: hex.EncodeToString(loadCAs(ctx, c)[v1alpha1.CARoleClient].Previous.Cert.SubjectKeyId), IssuedAt: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)})
		delete(started.Labels, v1alpha1.LabelCluster)
		started.Data[oldca.KubeconfigsDataKey] = record.String()
		Expect(k8s.Update(ctx, started)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(usage(ctx).Dependents).To(ContainElement(SatisfyAll(HaveField("Kind", v1alpha1.OldCADependentKubeconfig), HaveField("Name", "carousel:admin:carol"))))
			g.Expect(usage(ctx).Dependents).NotTo(ContainElement(HaveField("Name", "kubeconfigs")))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())

		By("deleting it: the gate can no longer tell who holds a kubeconfig from the old client CA")
		Expect(k8s.Delete(ctx, started)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(usage(ctx).Dependents).To(ContainElement(SatisfyAll(HaveField("Kind", v1alpha1.OldCADependentCluster), HaveField("Name", "kubeconfigs"),
				HaveField("Message", ContainSubstring("that the rotation judges by was deleted since")))))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		err = annotate(ctx, getCluster(ctx, key), v1alpha1.OperationCompleteCARotation)
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("Cluster kubeconfigs"))
	})

	It("completes when forced, and the API server then refuses the old-CA client", func(ctx SpecContext) {
		_, err := kubectlCarousel(ctx, "rotation", "complete", key.Name, "-n", key.Namespace, "--force")
		Expect(err).NotTo(HaveOccurred())
		waitForPhaseSlowly(ctx, key, v1alpha1.RotationCompleted)
		Expect(usage(ctx)).To(BeNil())
		Expect(meta.FindStatusCondition(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionOldCAsUnused)).To(BeNil())
		Eventually(func() error { return use(ctx, robot) }).Should(Satisfy(apierrors.IsUnauthorized))
	})

	// sender posts a batch to the Cluster's receiver with its token, as its
	// API server does, and returns the answer's status (0 when there is
	// none).
	sender := func(ctx context.Context) (send func(body io.Reader) int) {
		secret := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: credentials.AuditWebhookSecretName(key.Name)}, secret)).To(Succeed())
		kubeconfig, err := clientcmd.Load(secret.Data[v1alpha1.DataKeyKubeconfig])
		Expect(err).NotTo(HaveOccurred())
		url := kubeconfig.Clusters[kubeconfig.Contexts[kubeconfig.CurrentContext].Cluster].Server
		roots := x509.NewCertPool()
		Expect(roots.AppendCertsFromPEM(testEnv.WebhookInstallOptions.LocalServingCAData)).To(BeTrue())
		// The body goes only once the receiver reads it (Expect: 100-continue),
		// which it does after admitting the batch: a held batch's first byte is
		// taken only when it was admitted.
		webhook := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, ExpectContinueTimeout: time.Minute}}
		return func(body io.Reader) int {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
			Expect(err).NotTo(HaveOccurred())
			if sized, ok := body.(interface{ Size() int64 }); ok {
				req.ContentLength = sized.Size() // as kube-apiserver's client sends it
			}
			req.Header.Set("Authorization", "Bearer "+string(secret.Data[auditwebhook.DataKeyToken]))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Expect", "100-continue")
			resp, err := webhook.Do(req)
			if err != nil {
				return 0
			}
			_ = resp.Body.Close()
			return resp.StatusCode
		}
	}

	It("refuses a Cluster's batches beyond its bound in flight, and records what the API server sends again", func(ctx SpecContext) {
		send := sender(ctx)
		const emptyBatch = `{"apiVersion":"audit.k8s.io/v1","kind":"EventList","items":[]}`
		refused := func() float64 {
			families, err := metrics.Registry.Gather()
			Expect(err).NotTo(HaveOccurred())
			return max(0, metricValue(families, "carousel_audit_webhook_requests_total", map[string]string{"code": strconv.Itoa(http.StatusTooManyRequests)}))
		}

		By("holding as many batches of the Cluster in flight as the receiver admits: their bodies do not end")
		type heldBatch struct {
			body   *io.PipeWriter
			answer chan int
		}
		// hold sends a batch whose body does not end and reports whether the
		// receiver admitted it: it reads the first byte only then. A batch
		// refused while one of the API server's is in flight is answered
		// unread, and the write fails.
		hold := func() (heldBatch, bool) {
			r, w := io.Pipe()
			h := heldBatch{body: w, answer: make(chan int, 1)}
			go func() { h.answer <- send(sizedReader{Reader: r, size: int64(1 + len(emptyBatch))}) }()
			_, err := w.Write([]byte(" "))
			return h, err == nil
		}
		var held []heldBatch
		Eventually(func(g Gomega) {
			if h, admitted := hold(); admitted {
				held = append(held, h)
			}
			g.Expect(held).To(HaveLen(auditwebhook.MaxBatchesInFlightPerCluster))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		Expect(send(strings.NewReader(emptyBatch))).To(Equal(http.StatusTooManyRequests), "a batch beyond the bound is refused")

		By("using the API server as a new user meanwhile: while the bound holds, its batches are refused and none is recorded")
		atUse := refused()
		Expect(use(ctx, signed(ctx, "carousel:admin:carol"))).To(Succeed())
		// The API server sends a batch at most a second (its batch max wait)
		// after an event, and a refused one again a second later (the
		// Retry-After), ten times, before its backoff; on a loaded machine
		// later than that, so the refusals are waited for, not timed.
		Eventually(refused).WithContext(ctx).WithTimeout(20*time.Second).Should(BeNumerically(">=", atUse+3), "the API server's batches were refused while the bound held")
		Consistently(recordedUsers).WithContext(ctx).WithTimeout(2 * time.Second).ShouldNot(ContainElement("carousel:admin:carol"))
		for _, h := range held {
			Expect(h.answer).NotTo(Receive(), "a held batch was answered while it was held")
		}

		By("answering the held batches: the API server's next attempt is admitted and recorded")
		for _, h := range held {
			_, _ = h.body.Write([]byte(emptyBatch))
			Expect(h.body.Close()).To(Succeed())
			Eventually(h.answer).Should(Receive(Equal(http.StatusOK)))
		}
		// The API server's webhook backend may be in its backoff by then: five rounds, some two minutes.
		Eventually(recordedUsers).WithContext(ctx).WithTimeout(3 * time.Minute).Should(ContainElement("carousel:admin:carol"))
	})

	It("keeps the usage record within its bound, and does not vouch for a rotation that started while it had no room", func(ctx SpecContext) {
		By("sending a batch of 6,000 client certificates in use, more than a ConfigMap's 1 MiB could record")
		var events []string
		seen := time.Now().UTC().Format(metav1.RFC3339Micro)
		for i := range 6000 {
			events = append(events, fmt.Sprintf(`{"user":{"username":"system:node:filler-%04d","extra":{"authentication.kubernetes.io/credential-id":["X509SHA256=%064x"]}},`+
				`"requestReceivedTimestamp":%q,"stageTimestamp":%q}`, i, i, seen, seen))
		}
		full := `{"apiVersion":"audit.k8s.io/v1","kind":"EventList","items":[` + strings.Join(events, ",") + `]}`
		send := sender(ctx)
		Eventually(func() int { return send(strings.NewReader(full)) }).WithContext(ctx).WithTimeout(time.Minute).Should(Equal(http.StatusOK), "the batch is recorded")
		cm := &corev1.ConfigMap{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: credentials.CertificateUsageConfigMapName(key.Name)}, cm)).To(Succeed())
		Expect(len(cm.Data[oldca.DataKey])).To(BeNumerically("<=", oldca.MaxUsageBytes))
		u, err := oldca.Parse(cm.Data[oldca.DataKey])
		Expect(err).NotTo(HaveOccurred())
		Expect(u.Unrecorded).NotTo(BeNil(), "the record says it left sightings out")
		Expect(len(u.Credentials)).To(BeNumerically(">", 3000))

		By("starting a rotation: Prepared, the gate names the record and refuses the completion")
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotation)).To(Succeed())
		waitForPhaseSlowly(ctx, key, v1alpha1.RotationPrepared)
		Eventually(func(g Gomega) {
			g.Expect(usage(ctx)).NotTo(BeNil())
			g.Expect(usage(ctx).Dependents).To(ContainElement(SatisfyAll(
				HaveField("Kind", v1alpha1.OldCADependentCluster), HaveField("Name", "client-certificate-usage"),
				HaveField("Message", ContainSubstring("it had no room for them")))))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		err = annotate(ctx, getCluster(ctx, key), v1alpha1.OperationCompleteCARotation)
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("Cluster client-certificate-usage"))
	})
})

// sizedReader is a body whose length is known before it is all there, as
// kube-apiserver's webhook client sends a batch (with its Content-Length).
type sizedReader struct {
	io.Reader
	size int64
}

func (r sizedReader) Size() int64 { return r.size }
