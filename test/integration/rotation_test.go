package integration

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	clustercontroller "github.com/carousel-dev/carousel/pkg/controller/cluster"
	"github.com/carousel-dev/carousel/pkg/controller/workerrollout"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/operator"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

func createCluster(ctx context.Context, ns, name string, pools ...v1alpha1.WorkerPool) *v1alpha1.Cluster {
	GinkgoHelper()
	c := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3", Workers: pools},
	}
	Expect(k8s.Create(ctx, c)).To(Succeed())
	return c
}

// expectPrepared checks what DESIGN.md requires of Prepared: every bundle
// holds exactly the old and the new CA; clients verify only against the new
// CA, servers (and the API server's kubelet client) only against the old one.
func expectPrepared(ctx context.Context, c *v1alpha1.Cluster, before map[v1alpha1.CARole]*credentials.CAs) {
	GinkgoHelper()
	cas := loadCAs(ctx, c)
	for _, role := range v1alpha1.CARoles() {
		Expect(cas[role].Previous).NotTo(BeNil(), "role %s keeps its old CA", role)
		Expect(cas[role].Previous.Cert.Equal(before[role].Current.Cert)).To(BeTrue(), "role %s: the old CA is the one from before", role)
		Expect(cas[role].Current.Cert.Equal(before[role].Current.Cert)).To(BeFalse(), "role %s has a new CA", role)
		Expect(kit.Fingerprints(loadBundle(ctx, c, role))).To(ConsistOf(pki.Fingerprint(cas[role].Previous.Cert), pki.Fingerprint(cas[role].Current.Cert)),
			"bundle %s holds exactly two CAs", role)
	}
	for _, cert := range credentials.Certificates(c) {
		leaf, _ := loadCertificate(ctx, c, cert)
		okOld, okNew := verifiesAgainst(leaf, anyUsage(cert), cas[cert.SignedBy].Previous.Cert, cas[cert.SignedBy].Current.Cert)
		if cert.RenewIn == credentials.RenewInPreparing {
			Expect([]bool{okOld, okNew}).To(Equal([]bool{false, true}), "client certificate %s verifies only against the new CA", cert.Name)
		} else {
			Expect([]bool{okOld, okNew}).To(Equal([]bool{true, false}), "certificate %s verifies only against the old CA", cert.Name)
		}
	}
}

// expectOneCAEach checks what DESIGN.md requires of Completed, and what an
// abort requires of Aborted: of each role's two CAs, kept[role].Current alone
// remains anywhere (the status inventory included), and kept[role].Previous,
// key included, is gone. For Completed kept is the CAs of Prepared; for
// Aborted, the same swapped back.
func expectOneCAEach(ctx context.Context, c *v1alpha1.Cluster, kept map[v1alpha1.CARole]*credentials.CAs) {
	GinkgoHelper()
	cas := loadCAs(ctx, c)
	for _, role := range v1alpha1.CARoles() {
		Expect(cas[role].Previous).To(BeNil(), "role %s dropped its other CA", role)
		Expect(cas[role].Current.Cert.Equal(kept[role].Current.Cert)).To(BeTrue(), "role %s kept the CA it should end on", role)
		Expect(kit.Fingerprints(loadBundle(ctx, c, role))).To(Equal([]string{pki.Fingerprint(cas[role].Current.Cert)}))
		s := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.CASecretName(c.Name, role)}, s)).To(Succeed())
		Expect(s.Data).To(HaveLen(2), "the CA Secret of %s holds only tls.crt and tls.key", role)
	}
	for _, cert := range credentials.Certificates(c) {
		leaf, s := loadCertificate(ctx, c, cert)
		okGone, okKept := verifiesAgainst(leaf, anyUsage(cert), kept[cert.SignedBy].Previous.Cert, cas[cert.SignedBy].Current.Cert)
		Expect([]bool{okGone, okKept}).To(Equal([]bool{false, true}), "certificate %s verifies only against the CA kept", cert.Name)
		trust, err := pki.ParseBundle(s.Data[v1alpha1.DataKeyCABundle])
		Expect(err).NotTo(HaveOccurred())
		Expect(trust).To(HaveLen(1), "the trust bundle next to %s holds only the CA kept", cert.Name)
	}
	for _, inv := range c.Status.Credentials.CertificateAuthorities {
		Expect(inv.Previous).To(BeNil())
		Expect(inv.Current.Fingerprint).To(Equal(pki.Fingerprint(kept[inv.Role].Current.Cert)))
	}
}

var _ = Describe("Credentials and the CA rotation", func() {
	var (
		ns     string
		writes atomic.Int64
		mgr    ctrl.Manager
	)
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		writes.Store(0)
		mgr = startControllers(ns, &writes)
	})

	It("caches only the objects labelled with a Cluster", func(ctx SpecContext) {
		// The unlabelled Secret first: watch events arrive in order, so once
		// the cache holds "managed", "unrelated" has already been passed over.
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unrelated"}})).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "managed", Labels: map[string]string{v1alpha1.LabelCluster: "x"}}})).To(Succeed())
		Eventually(func(g Gomega) []string {
			var list corev1.SecretList
			g.Expect(mgr.GetCache().List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			var names []string
			for _, s := range list.Items {
				names = append(names, s.Name)
			}
			return names
		}).Should(Equal([]string{"managed"}))
	})

	It("issues every CA, bundle, certificate and kubeconfig of a new Cluster", func(ctx SpecContext) {
		c := createCluster(ctx, ns, "fresh")
		c = waitForReady(ctx, client.ObjectKeyFromObject(c))

		cas := loadCAs(ctx, c)
		for _, role := range v1alpha1.CARoles() {
			Expect(cas[role].Previous).To(BeNil())
			Expect(cas[role].Current.Cert.IsCA).To(BeTrue())
			Expect(kit.Fingerprints(loadBundle(ctx, c, role))).To(Equal([]string{pki.Fingerprint(cas[role].Current.Cert)}))
		}
		for _, cert := range credentials.Certificates(c) {
			leaf, s := loadCertificate(ctx, c, cert)
			Expect(pki.Verify(leaf, pki.NewBundle(cas[cert.SignedBy].Current.Cert), anyUsage(cert), time.Now())).To(Succeed(), cert.Name)
			Expect(leaf.Subject.CommonName).To(Equal(cert.CommonName))
			Expect(metav1.GetControllerOf(s).UID).To(Equal(c.UID), "owned by the Cluster, so deleted with it")
			if cert.Kubeconfig {
				kc, err := clientcmd.Load(s.Data[v1alpha1.DataKeyKubeconfig])
				Expect(err).NotTo(HaveOccurred())
				Expect(kc.Clusters[c.Name].CertificateAuthorityData).To(Equal(loadBundle(ctx, c, v1alpha1.CARoleCluster).PEM()))
			}
		}
		sa := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: credentials.ServiceAccountKeySecretName(c.Name)}, sa)).To(Succeed())
		_, err := pki.ParsePrivateKey(sa.Data[credentials.DataKeyServiceAccountKey])
		Expect(err).NotTo(HaveOccurred())

		By("describing the CAs in the status without any key material")
		Expect(c.Status.Credentials.CertificateAuthorities).To(HaveLen(len(v1alpha1.CARoles())))
		Expect(c.Status.Credentials.EarliestCAExpiry).NotTo(BeNil())
		status, err := json.Marshal(c.Status)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(status)).NotTo(ContainSubstring("PRIVATE KEY"))
		Expect(meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionControlPlaneReachable)).To(
			HaveField("Reason", v1alpha1.ReasonNoEndpoint), "without an endpoint the API-server checks are skipped, and a condition says so")
		Expect(meta.IsStatusConditionFalse(c.Status.Conditions, v1alpha1.ConditionCAExpiring)).To(BeTrue())
	})

	// expectNoOpReconciles waits until the controller settled, then checks
	// that three more reconciles of the Cluster write nothing and generate
	// no key.
	expectNoOpReconciles := func(ctx context.Context, key client.ObjectKey) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			settled := writes.Load()
			g.Consistently(writes.Load).WithTimeout(time.Second).Should(Equal(settled), "the controller settled")
		}).WithTimeout(30 * time.Second).Should(Succeed())
		var direct atomic.Int64
		r := &clustercontroller.Reconciler{
			Client: kit.CountingClient{Client: k8s, Writes: &direct, Budget: -1}, Clock: clock.RealClock{},
			CAExpiryWarning: 30 * 24 * time.Hour, ManagedPollInterval: time.Second, Recommendations: operator.DefaultOptions().Recommendations,
			// As the manager's: a pool waiting on another strategy would read differently.
			WorkerRollouts: map[v1alpha1.WorkerRolloutStrategy]clustercontroller.WorkerRollout{v1alpha1.RolloutManual: workerrollout.ManualRollout{}},
		}
		keys := pki.KeysGenerated()
		for range 3 {
			_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(direct.Load()).To(BeZero(), "API writes in three no-op reconciles")
		Expect(pki.KeysGenerated()-keys).To(BeZero(), "keys generated in three no-op reconciles")
	}

	It("makes no API write and generates no key when nothing changed", func(ctx SpecContext) {
		c := createCluster(ctx, ns, "steady")
		waitForReady(ctx, client.ObjectKeyFromObject(c))
		expectNoOpReconciles(ctx, client.ObjectKeyFromObject(c))
	})

	It("rotates every CA in two phases with the right CA signing each certificate", func(ctx SpecContext) {
		c := createCluster(ctx, ns, "rotated")
		key := client.ObjectKeyFromObject(c)
		c = waitForReady(ctx, key)
		before := loadCAs(ctx, c)
		writesAtStart := writes.Load()

		started := time.Now()
		Expect(annotate(ctx, c, v1alpha1.OperationStartCARotation)).To(Succeed())
		c = waitForPhase(ctx, key, v1alpha1.RotationPrepared)
		toPrepared := time.Since(started)
		rot := c.CARotation()
		Expect(rot.LastInitiationTime).NotTo(BeNil())
		Expect(rot.LastInitiationFinishedTime).NotTo(BeNil())
		Expect(rot.LastInitiationFinishedTime.Before(rot.LastInitiationTime)).To(BeFalse())
		Expect(rot.PendingWorkersRollouts).To(BeEmpty())
		Expect(meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCARotation)).To(HaveField("Reason", "WaitingForCompleteOperation"))
		expectPrepared(ctx, c, before)
		prepared := loadCAs(ctx, c)
		writesPreparing := writes.Load() - writesAtStart

		started = time.Now()
		Expect(annotate(ctx, c, v1alpha1.OperationCompleteCARotation)).To(Succeed())
		c = waitForPhase(ctx, key, v1alpha1.RotationCompleted)
		toCompleted := time.Since(started)
		Expect(c.CARotation().LastCompletionTriggeredTime).NotTo(BeNil())
		Expect(c.CARotation().LastCompletionTime).NotTo(BeNil())
		expectOneCAEach(ctx, c, prepared)

		Eventually(func(g Gomega) []string {
			var list eventsv1.EventList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			var reasons []string
			for _, e := range list.Items {
				reasons = append(reasons, e.Reason)
			}
			return reasons
		}).Should(ContainElements(v1alpha1.EventRotationPhaseChanged, v1alpha1.EventCAGenerated, v1alpha1.EventCARemoved))

		By("exporting the phase and the CA expiry as Prometheus metrics")
		families, err := metrics.Registry.Gather()
		Expect(err).NotTo(HaveOccurred())
		Expect(metricValue(families, "carousel_ca_rotation_phase", map[string]string{"namespace": ns, "cluster": c.Name, "phase": "Completed"})).To(Equal(1.0))
		Expect(metricValue(families, "carousel_ca_rotation_phase", map[string]string{"namespace": ns, "cluster": c.Name, "phase": "Prepared"})).To(Equal(0.0))
		Expect(metricValue(families, "carousel_ca_expiry_timestamp_seconds", map[string]string{"namespace": ns, "cluster": c.Name, "role": "client", "generation": "current"})).
			To(Equal(float64(prepared[v1alpha1.CARoleClient].Current.Cert.NotAfter.Unix())))

		AddReportEntry("start-ca-rotation → Prepared (no workers, no consumers)", toPrepared.String())
		AddReportEntry("complete-ca-rotation → Completed (no workers, no consumers)", toCompleted.String())
		AddReportEntry("API writes in Preparing", writesPreparing)
		AddReportEntry("API writes in Finalizing", writes.Load()-writesAtStart-writesPreparing)
		GinkgoWriter.Printf("rotation: prepared in %s, completed in %s, writes %d + %d\n", toPrepared, toCompleted, writesPreparing, writes.Load()-writesAtStart-writesPreparing)
	})

	It("waits for manually rolled worker pools in both phases", func(ctx SpecContext) {
		c := createCluster(ctx, ns, "workers",
			v1alpha1.WorkerPool{Name: "manual", RolloutStrategy: v1alpha1.RolloutManual},
			v1alpha1.WorkerPool{Name: "in-place", RolloutStrategy: v1alpha1.RolloutInPlace})
		key := client.ObjectKeyFromObject(c)
		c = waitForReady(ctx, key)

		Expect(annotate(ctx, c, v1alpha1.OperationStartCARotation)).To(Succeed())
		expectPendingPools := func(names ...string) *v1alpha1.Cluster {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				c = getCluster(ctx, key)
				g.Expect(c.Annotations).NotTo(HaveKey(v1alpha1.OperationAnnotation))
				var pending []string
				for _, p := range c.CARotation().PendingWorkersRollouts {
					pending = append(pending, p.Name)
				}
				g.Expect(pending).To(ConsistOf(names))
				g.Expect(meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCARotation)).To(HaveField("Reason", "WaitingForWorkerRollout"))
			}).Should(Succeed())
			return c
		}
		c = expectPendingPools("manual", "in-place")
		Expect(c.CARotationPhase()).To(Equal(v1alpha1.RotationPreparing))
		Consistently(func() v1alpha1.CARotationPhase { return getCluster(ctx, key).CARotationPhase() }).
			WithTimeout(time.Second).Should(Equal(v1alpha1.RotationPreparing), "Prepared only once every pool rolled")

		Expect(annotate(ctx, c, "rollout-workers=manual")).To(Succeed())
		c = expectPendingPools("in-place")
		Expect(annotate(ctx, c, "rollout-workers=in-place")).To(Succeed())
		c = waitForPhase(ctx, key, v1alpha1.RotationPrepared)

		Expect(annotate(ctx, c, v1alpha1.OperationCompleteCARotation)).To(Succeed())
		c = expectPendingPools("manual", "in-place")
		Expect(c.CARotationPhase()).To(Equal(v1alpha1.RotationFinalizing))
		Expect(annotate(ctx, c, "rollout-workers=manual,in-place")).To(Succeed())
		waitForPhase(ctx, key, v1alpha1.RotationCompleted)
	})

	It("aborts a Prepared rotation: back to the old CAs, the new ones deleted only once the worker pools rolled back and no kubeconfig from them is held, "+
		"which roll again, and a new rotation starts", func(ctx SpecContext) {
		c := createCluster(ctx, ns, "aborted", v1alpha1.WorkerPool{Name: "manual", RolloutStrategy: v1alpha1.RolloutManual})
		key := client.ObjectKeyFromObject(c)
		c = waitForReady(ctx, key)
		before := loadCAs(ctx, c)

		Expect(annotate(ctx, c, v1alpha1.OperationStartCARotation)).To(Succeed())
		Eventually(func() bool { return getCluster(ctx, key).IsPendingWorkerPool("manual") }).Should(BeTrue())
		Expect(annotate(ctx, getCluster(ctx, key), "rollout-workers=manual")).To(Succeed())
		c = waitForPhase(ctx, key, v1alpha1.RotationPrepared)
		prepared := loadCAs(ctx, c)

		By("queuing the completion for a maintenance window that is not open: the abort drops it, or it would complete the next rotation")
		later := time.Now().UTC().Add(6 * time.Hour)
		patch := client.MergeFrom(c.DeepCopy())
		c.Spec.Maintenance = &v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{
			Begin: later.Format("150405") + "+0000", End: later.Add(time.Hour).Format("150405") + "+0000"}}
		c.Annotations = map[string]string{v1alpha1.MaintenanceOperationAnnotation: v1alpha1.OperationCompleteCARotation}
		Expect(k8s.Patch(ctx, c, patch)).To(Succeed())

		By("handing carol a kubeconfig from the new client CA, as kubectl carousel kubeconfig does in Prepared")
		recordKubeconfig(ctx, c, "carousel:admin:carol", prepared[v1alpha1.CARoleClient].Current)

		started := time.Now()
		Expect(annotate(ctx, c, v1alpha1.OperationAbortCARotation)).To(Succeed())
		By("keeping the new CAs trusted while the pool, which moved to them, rolls back")
		Eventually(func(g Gomega) {
			c = getCluster(ctx, key)
			g.Expect(c.Annotations).NotTo(HaveKey(v1alpha1.OperationAnnotation))
			g.Expect(c.Annotations).NotTo(HaveKey(v1alpha1.MaintenanceOperationAnnotation))
			g.Expect(c.CARotationPhase()).To(Equal(v1alpha1.RotationAborting))
			g.Expect(meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCARotation)).To(HaveField("Reason", "WaitingForWorkerRollout"))
			cas := loadCAs(ctx, c)
			for _, role := range v1alpha1.CARoles() {
				g.Expect(cas[role].Current.Cert.Equal(before[role].Current.Cert)).To(BeTrue(), "role %s: the old CA is current again", role)
				g.Expect(cas[role].Previous).NotTo(BeNil(), "role %s: the new CA stays until the pool rolled back", role)
				g.Expect(cas[role].Previous.Cert.Equal(prepared[role].Current.Cert)).To(BeTrue(), "role %s: no third CA", role)
			}
			for _, cert := range credentials.Certificates(c) {
				leaf, _ := loadCertificate(ctx, c, cert)
				okOld, okNew := verifiesAgainst(leaf, anyUsage(cert), before[cert.SignedBy].Current.Cert, prepared[cert.SignedBy].Current.Cert)
				g.Expect([]bool{okOld, okNew}).To(Equal([]bool{true, false}), "certificate %s is back on the old CA", cert.Name)
			}
		}).Should(Succeed())
		Expect(c.CARotation().LastAbortTriggeredTime).NotTo(BeNil())
		Consistently(func() *pki.KeyPair { return loadCAs(ctx, c)[v1alpha1.CARoleClient].Previous }).WithTimeout(2*time.Second).
			ShouldNot(BeNil(), "the new client CA is kept while a kubelet may still hold a certificate from it")
		By("writing nothing and generating no key while Aborting waits for the pool, the CAs swapped")
		expectNoOpReconciles(ctx, key)

		Expect(annotate(ctx, c, "rollout-workers=manual")).To(Succeed())
		By("keeping the new client CA, once the pool is back, while carol holds a kubeconfig from it")
		Eventually(func(g Gomega) {
			c = getCluster(ctx, key)
			g.Expect(c.IsPendingWorkerPool("manual")).To(BeFalse())
			cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCARotation)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Reason).To(Equal(string(v1alpha1.ReasonWaitingForKubeconfigHolders)))
			g.Expect(cond.Message).To(ContainSubstring("1 user(s) of kubectl carousel kubeconfig hold a kubeconfig from the new client CA, which the abort deletes: carousel:admin:carol"))
		}).Should(Succeed())
		Consistently(func() *pki.KeyPair { return loadCAs(ctx, c)[v1alpha1.CARoleClient].Previous }).WithTimeout(2*time.Second).
			ShouldNot(BeNil(), "the new client CA is kept while carol's kubeconfig from it is valid")
		Expect(c.CARotation().AbortRolledBackTime).To(BeNil(), "the roll-back is recorded once no one is waited for")
		expectNoOpReconciles(ctx, key)
		By("carol takes a new kubeconfig, which kubectl carousel kubeconfig now signs from the old client CA")
		_, signer, err := credentials.ClientCAInUse(ctx, k8s, c)
		Expect(err).NotTo(HaveOccurred())
		Expect(signer.Cert.Equal(before[v1alpha1.CARoleClient].Current.Cert)).To(BeTrue(), "the plugin's signer is the old client CA again")
		recordKubeconfig(ctx, c, "carousel:admin:carol", signer)
		By("deleting the new CAs, then rolling the pool again to drop them from its nodes' trust")
		Eventually(func(g Gomega) {
			c = getCluster(ctx, key)
			g.Expect(c.CARotation().AbortRolledBackTime).NotTo(BeNil())
			g.Expect(loadCAs(ctx, c)[v1alpha1.CARoleClient].Previous).To(BeNil())
			g.Expect(c.IsPendingWorkerPool("manual")).To(BeTrue(), "the pool rolls a second time")
			g.Expect(c.CARotationPhase()).To(Equal(v1alpha1.RotationAborting))
		}).Should(Succeed())
		Expect(annotate(ctx, c, "rollout-workers=manual")).To(Succeed())
		c = waitForPhase(ctx, key, v1alpha1.RotationAborted)
		toAborted := time.Since(started)
		expectNoOpReconciles(ctx, key)
		Expect(c.CARotation().LastAbortTime).NotTo(BeNil())
		Expect(c.CARotation().PendingWorkersRollouts).To(BeEmpty())
		swappedBack := map[v1alpha1.CARole]*credentials.CAs{}
		for _, role := range v1alpha1.CARoles() {
			swappedBack[role] = &credentials.CAs{Current: before[role].Current, Previous: prepared[role].Current}
		}
		expectOneCAEach(ctx, c, swappedBack)
		Eventually(func(g Gomega) []string {
			var list eventsv1.EventList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				notes = append(notes, e.Reason+": "+e.Note)
			}
			return notes
		}).Should(ContainElements(
			// One event names every role's CA.
			SatisfyAll(HavePrefix(v1alpha1.EventCARestored+": Restored the old CAs as current"),
				ContainSubstring("cluster CA "+pki.Fingerprint(before[v1alpha1.CARoleCluster].Current.Cert)),
				ContainSubstring("vpn CA "+pki.Fingerprint(before[v1alpha1.CARoleVPN].Current.Cert))),
			SatisfyAll(HavePrefix(v1alpha1.EventCARemoved+": Removed the aborted new CAs"),
				ContainSubstring("cluster CA "+pki.Fingerprint(prepared[v1alpha1.CARoleCluster].Current.Cert)),
				ContainSubstring("vpn CA "+pki.Fingerprint(prepared[v1alpha1.CARoleVPN].Current.Cert))),
			ContainSubstring("CA rotation phase Aborting → Aborted"),
			ContainSubstring(v1alpha1.EventMaintenanceOperationDropped+": Dropped carousel.dev/maintenance-operation=complete-ca-rotation")))

		By("starting a new rotation from Aborted, with CAs new again")
		Expect(annotate(ctx, c, v1alpha1.OperationStartCARotation)).To(Succeed())
		Eventually(func() bool { return getCluster(ctx, key).IsPendingWorkerPool("manual") }).Should(BeTrue())
		Expect(annotate(ctx, getCluster(ctx, key), "rollout-workers=manual")).To(Succeed())
		c = waitForPhase(ctx, key, v1alpha1.RotationPrepared)
		expectPrepared(ctx, c, before)
		for _, role := range v1alpha1.CARoles() {
			Expect(loadCAs(ctx, c)[role].Current.Cert.Equal(prepared[role].Current.Cert)).To(BeFalse(), "role %s: the aborted CA is not reused", role)
		}
		AddReportEntry("abort-ca-rotation → Aborted (a manual pool, no consumers)", toAborted.String())
	})

	It("rolls no worker pool when started without workers rollout, then each pool rotate-rollout-workers names", func(ctx SpecContext) {
		c := createCluster(ctx, ns, "held",
			v1alpha1.WorkerPool{Name: "manual", RolloutStrategy: v1alpha1.RolloutManual},
			v1alpha1.WorkerPool{Name: "in-place", RolloutStrategy: v1alpha1.RolloutInPlace})
		key := client.ObjectKeyFromObject(c)
		c = waitForReady(ctx, key)
		before := loadCAs(ctx, c)

		// expectPools waits until the operation was handled and the rotation
		// is in phase, with the pools pending (held ones by name) and the
		// CARotationInProgress condition's reason and message.
		type pool struct {
			name string
			held bool
		}
		expectPools := func(phase v1alpha1.CARotationPhase, reason v1alpha1.RotationReason, message string, pools ...pool) *v1alpha1.Cluster {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				c = getCluster(ctx, key)
				g.Expect(c.Annotations).NotTo(HaveKey(v1alpha1.OperationAnnotation))
				g.Expect(c.CARotationPhase()).To(Equal(phase))
				var got []pool
				for _, p := range c.CARotation().PendingWorkersRollouts {
					got = append(got, pool{p.Name, p.Held})
				}
				g.Expect(got).To(ConsistOf(pools))
				cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCARotation)
				g.Expect(cond).NotTo(BeNil())
				g.Expect(cond.Reason).To(Equal(string(reason)))
				g.Expect(cond.Message).To(ContainSubstring(message))
			}).Should(Succeed())
			return c
		}

		By("preparing the control plane with every pool held")
		Expect(annotate(ctx, c, v1alpha1.OperationStartCARotationWithoutWorkersRollout)).To(Succeed())
		c = expectPools(v1alpha1.RotationWaitingForWorkersRollout, v1alpha1.ReasonWaitingForWorkersRolloutOperation,
			"2 pool(s) held: manual, in-place; roll them with carousel.dev/operation=rotate-rollout-workers=<pool>[,<pool>]",
			pool{"manual", true}, pool{"in-place", true})
		Expect(c.CARotation().LastInitiationFinishedTime).To(BeNil(), "not Prepared")
		expectPrepared(ctx, c, before)
		Expect(annotate(ctx, c, v1alpha1.OperationCompleteCARotation)).To(MatchError(ContainSubstring(
			"cannot complete the CA rotation in phase WaitingForWorkersRollout, only in phase Prepared: roll the held worker pools with " +
				"carousel.dev/operation=rotate-rollout-workers=<pool>[,<pool>]")))
		Expect(annotate(ctx, c, v1alpha1.OperationStartCARotation)).To(MatchError(ContainSubstring(
			"cannot start a CA rotation: the rotation is in phase WaitingForWorkersRollout")))
		Expect(annotate(ctx, c, "rollout-workers=nope")).To(MatchError(ContainSubstring(`worker pool "nope" does not exist`)))

		By("rolling one pool: back to Preparing until it rolled, then waiting for the other")
		Expect(annotate(ctx, c, "rotate-rollout-workers=manual")).To(Succeed())
		c = expectPools(v1alpha1.RotationPreparing, v1alpha1.ReasonWaitingForWorkers, "roll pool manual and report it",
			pool{"manual", false}, pool{"in-place", true})
		// In Preparing while in-place is held, rotate-rollout-workers is taken, for held pools only.
		Expect(annotate(ctx, c, "rotate-rollout-workers=manual")).To(MatchError(ContainSubstring(
			`worker pool "manual" is not held in phase Preparing`)))
		Expect(annotate(ctx, c, v1alpha1.OperationCompleteCARotation)).To(MatchError(ContainSubstring(
			"cannot complete the CA rotation in phase Preparing, only in phase Prepared: roll the held worker pools with")))
		Expect(annotate(ctx, c, "rollout-workers=manual")).To(Succeed())
		c = expectPools(v1alpha1.RotationWaitingForWorkersRollout, v1alpha1.ReasonWaitingForWorkersRolloutOperation, "1 pool(s) held: in-place",
			pool{"in-place", true})
		Expect(annotate(ctx, c, "rotate-rollout-workers=manual")).To(MatchError(ContainSubstring(
			`worker pool "manual" is not held in phase WaitingForWorkersRollout`)))

		By("rolling the last pool: Prepared")
		Expect(annotate(ctx, c, "rotate-rollout-workers=in-place")).To(Succeed())
		c = expectPools(v1alpha1.RotationPreparing, v1alpha1.ReasonWaitingForWorkers, "pool in-place", pool{"in-place", false})
		Expect(annotate(ctx, c, "rollout-workers=in-place")).To(Succeed())
		c = waitForPhase(ctx, key, v1alpha1.RotationPrepared)
		Expect(c.CARotation().LastInitiationFinishedTime).NotTo(BeNil())
		expectPrepared(ctx, c, before)
		Expect(loadCAs(ctx, c)[v1alpha1.CARoleClient].Current.Cert.Equal(before[v1alpha1.CARoleClient].Current.Cert)).To(BeFalse())

		By("completing: every pool rolls again, none held")
		Expect(annotate(ctx, c, v1alpha1.OperationCompleteCARotation)).To(Succeed())
		c = expectPools(v1alpha1.RotationFinalizing, v1alpha1.ReasonWaitingForWorkers, "", pool{"manual", false}, pool{"in-place", false})
		Expect(annotate(ctx, c, "rollout-workers=manual,in-place")).To(Succeed())
		waitForPhase(ctx, key, v1alpha1.RotationCompleted)

		Eventually(func(g Gomega) []string {
			var events eventsv1.EventList
			g.Expect(k8s.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
			var phases []string
			for _, e := range events.Items {
				if e.Regarding.Name == c.Name && e.Reason == v1alpha1.EventRotationPhaseChanged {
					phases = append(phases, e.Note)
				}
			}
			return phases
		}).Should(ContainElements(
			"CA rotation phase none (never rotated) → PreparingWithoutWorkersRollout",
			"CA rotation phase PreparingWithoutWorkersRollout → WaitingForWorkersRollout",
			"CA rotation phase WaitingForWorkersRollout → Preparing",
			"CA rotation phase Preparing → WaitingForWorkersRollout",
			"CA rotation phase Preparing → Prepared"))
	})

	It("rolls the workloads that consume the credentials, and advances only once they rolled out", func(ctx SpecContext) {
		c := createCluster(ctx, ns, "consumed")
		key := client.ObjectKeyFromObject(c)
		c = waitForReady(ctx, key)
		apiserver := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-apiserver", Labels: map[string]string{v1alpha1.LabelCluster: c.Name}},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kube-apiserver"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "kube-apiserver"}},
					Spec: corev1.PodSpec{
						Containers: []corev1.Container{{Name: "kube-apiserver", Image: "kube-apiserver"}},
						Volumes: []corev1.Volume{
							{Name: "serving", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: credentials.CertificateSecretName(c.Name, credentials.CertKubeAPIServer)}}},
							{Name: "client-ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
								LocalObjectReference: corev1.LocalObjectReference{Name: credentials.BundleConfigMapName(c.Name, v1alpha1.CARoleClient)}}}},
						},
					},
				},
			},
		}
		Expect(k8s.Create(ctx, apiserver)).To(Succeed())
		checksum := func() string {
			d := &appsv1.Deployment{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(apiserver), d)).To(Succeed())
			return d.Spec.Template.Annotations[v1alpha1.AnnotationCredentialsChecksum]
		}
		Eventually(checksum).ShouldNot(BeEmpty(), "the consumer is stamped with the checksum of what it mounts")
		markRolledOut(ctx, c)
		initial := checksum()

		Expect(annotate(ctx, c, v1alpha1.OperationStartCARotation)).To(Succeed())
		Eventually(checksum).ShouldNot(Equal(initial), "the new client-CA bundle rolls the API server")
		Eventually(func(g Gomega) {
			g.Expect(meta.FindStatusCondition(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionCARotation)).To(
				HaveField("Reason", "WaitingForConsumerRollout"))
		}).Should(Succeed())
		Consistently(func() v1alpha1.CARotationPhase { return getCluster(ctx, key).CARotationPhase() }).
			WithTimeout(time.Second).Should(Equal(v1alpha1.RotationPreparing), "not Prepared while the API server rolls")
		Eventually(func() v1alpha1.CARotationPhase {
			markRolledOut(ctx, c)
			return getCluster(ctx, key).CARotationPhase()
		}).WithTimeout(time.Minute).Should(Equal(v1alpha1.RotationPrepared))
	})
})

var _ = Describe("Operations refused by the admission webhook", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	// The webhook decides from the phase in the status; these specs set the
	// status directly, as the controller would have.
	withPhase := func(ctx context.Context, name string, phase v1alpha1.CARotationPhase, pending ...string) *v1alpha1.Cluster {
		GinkgoHelper()
		c := createCluster(ctx, ns, name, v1alpha1.WorkerPool{Name: "pool-a", RolloutStrategy: v1alpha1.RolloutManual},
			v1alpha1.WorkerPool{Name: "pool-b", RolloutStrategy: v1alpha1.RolloutManual})
		if phase != "" {
			rot := &v1alpha1.CARotation{Phase: phase, LastInitiationTime: ptr.To(metav1.Now())}
			for _, p := range pending {
				rot.PendingWorkersRollouts = append(rot.PendingWorkersRollouts, v1alpha1.PendingWorkersRollout{Name: p})
			}
			c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: rot}}
			Expect(k8s.Status().Update(ctx, c)).To(Succeed())
		}
		return c
	}

	DescribeTable("with a message that names the phase and what to do",
		func(ctx SpecContext, phase v1alpha1.CARotationPhase, pending []string, op, want string) {
			c := withPhase(ctx, "refused", phase, pending...)
			err := annotate(ctx, c, op)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(`admission webhook "clusters.carousel.dev" denied the request`))
			Expect(err.Error()).To(ContainSubstring(want))
		},
		Entry("complete before Prepared", v1alpha1.RotationPreparing, nil, v1alpha1.OperationCompleteCARotation,
			"cannot complete the CA rotation in phase Preparing, only in phase Prepared: wait until the phase is Prepared"),
		Entry("complete, never rotated", v1alpha1.CARotationPhase(""), nil, v1alpha1.OperationCompleteCARotation,
			"cannot complete the CA rotation in phase none (never rotated), only in phase Prepared: start one with carousel.dev/operation=start-ca-rotation"),
		Entry("start twice", v1alpha1.RotationPreparing, nil, v1alpha1.OperationStartCARotation,
			"cannot start a CA rotation: the rotation is in phase Preparing: wait until the phase is Prepared"),
		Entry("start while Prepared", v1alpha1.RotationPrepared, nil, v1alpha1.OperationStartCARotation,
			"the rotation is in phase Prepared: complete it with carousel.dev/operation=complete-ca-rotation"),
		Entry("abort once Finalizing", v1alpha1.RotationFinalizing, nil, v1alpha1.OperationAbortCARotation,
			"cannot abort the CA rotation in phase Finalizing: only a rotation that has not been completed"),
		Entry("abort, never rotated", v1alpha1.CARotationPhase(""), nil, v1alpha1.OperationAbortCARotation,
			"cannot abort the CA rotation in phase none (never rotated)"),
		Entry("complete while Aborting", v1alpha1.RotationAborting, nil, v1alpha1.OperationCompleteCARotation,
			"cannot complete the CA rotation in phase Aborting, only in phase Prepared: wait until the phase is Aborted"),
		Entry("an unknown operation", v1alpha1.CARotationPhase(""), nil, "rotate-everything",
			`unknown operation "rotate-everything": use one of start-ca-rotation, start-ca-rotation-without-workers-rollout, complete-ca-rotation[=force], abort-ca-rotation[=force], rotate-serviceaccount-key-start, rotate-serviceaccount-key-complete, rotate-credentials-start, rotate-credentials-complete[=force], reconcile, rollout-workers=<pool>[,<pool>], rotate-rollout-workers=<pool>[,<pool>], reissue-ca=<role>[,<role>] or reissue-service-account-key`),
		Entry("an unknown pool", v1alpha1.RotationPreparing, []string{"pool-a"}, "rollout-workers=pool-z",
			`worker pool "pool-z" does not exist (phase Preparing): name pools from spec.workers`),
		Entry("a pool that is not pending", v1alpha1.RotationPreparing, []string{"pool-a"}, "rollout-workers=pool-b",
			`worker pool "pool-b" has no pending rollout in phase Preparing`),
		Entry("a pool named twice", v1alpha1.RotationPreparing, []string{"pool-a"}, "rollout-workers=pool-a,pool-a",
			`names worker pool "pool-a" twice`),
	)

	It("refuses an operation on a Cluster being deleted", func(ctx SpecContext) {
		c := withPhase(ctx, "deleting", v1alpha1.RotationPrepared)
		c.Finalizers = []string{"test.carousel.dev/hold"}
		Expect(k8s.Update(ctx, c)).To(Succeed())
		Expect(k8s.Delete(ctx, c)).To(Succeed())
		c = getCluster(ctx, client.ObjectKeyFromObject(c))
		err := annotate(ctx, c, v1alpha1.OperationCompleteCARotation)
		Expect(err).To(MatchError(ContainSubstring("the cluster is being deleted: no operation is accepted")))
		c.Finalizers = nil
		Expect(k8s.Update(ctx, c)).To(Succeed())
	})

	It("refuses spec changes that would break a rotation under way", func(ctx SpecContext) {
		c := withPhase(ctx, "frozen", v1alpha1.RotationPreparing, "pool-a")
		c.Spec.Certificates.KeyAlgorithm = v1alpha1.KeyAlgorithmRSA3072
		Expect(k8s.Update(ctx, c)).To(MatchError(ContainSubstring("spec.certificates: Forbidden: cannot change while the CA rotation is in phase Preparing")))
		c = getCluster(ctx, client.ObjectKeyFromObject(c))
		c.Spec.Workers = c.Spec.Workers[1:]
		Expect(k8s.Update(ctx, c)).To(MatchError(ContainSubstring(`cannot remove worker pool "pool-a" while its rollout is pending`)))
		c = getCluster(ctx, client.ObjectKeyFromObject(c))
		c.Spec.Workers[0].RolloutStrategy, c.Spec.Workers[0].MachineDeployment = v1alpha1.RolloutReplace, "frozen-pool-a"
		Expect(k8s.Update(ctx, c)).To(MatchError(ContainSubstring(
			`cannot change the rollout strategy or MachineDeployment of worker pool "pool-a" while it is being rolled in phase Preparing: ` +
				`wait until it leaves pendingWorkersRollouts, or roll it yourself and report it with carousel.dev/operation=rollout-workers=pool-a`)))
	})

	It("refuses an invalid spec that the schema lets through", func(ctx SpecContext) {
		c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "old"}, Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.20.0"}}
		Expect(k8s.Create(ctx, c)).To(MatchError(ContainSubstring("spec.kubernetesVersion: Invalid value: \"1.20.0\": unsupported Kubernetes version")))
	})
})

var _ = Describe("Crash safety", func() {
	// No controller manager runs here: each "process" is a fresh reconciler
	// that dies (its writes start failing) after a budget of writes, and the
	// next one takes over from what the API server holds.
	It("never mints a second new CA nor loses an old one, whichever write the operator dies after", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		c := createCluster(ctx, ns, "crashy")
		key := client.ObjectKeyFromObject(c)

		seen := map[v1alpha1.CARole]map[string]bool{}
		record := func() {
			for role, cas := range loadCAsIfPresent(ctx, getCluster(ctx, key)) {
				if seen[role] == nil {
					seen[role] = map[string]bool{}
				}
				seen[role][pki.Fingerprint(cas.Current.Cert)] = true
				if cas.Previous != nil {
					seen[role][pki.Fingerprint(cas.Previous.Cert)] = true
				}
			}
		}
		crashes := 0
		// reconcileWithCrashes drives reconciles, each allowed one write, until
		// the Cluster satisfies done: a pass that tries a second one dies with
		// its operator, and a new operator, with nothing in memory, takes over.
		reconcileWithCrashes := func(done func(*v1alpha1.Cluster) bool) {
			GinkgoHelper()
			var r *clustercontroller.Reconciler
			var n atomic.Int64
			for i := 0; i < 2000 && !done(getCluster(ctx, key)); i++ {
				if r == nil {
					r = &clustercontroller.Reconciler{
						Client: kit.CountingClient{Client: k8s, Writes: &n, Budget: 1}, Clock: clock.RealClock{},
						Recorder: &events.FakeRecorder{}, CAExpiryWarning: time.Hour, ManagedPollInterval: time.Millisecond, // its events go nowhere
						WorkerRollouts: map[v1alpha1.WorkerRolloutStrategy]clustercontroller.WorkerRollout{v1alpha1.RolloutManual: workerrollout.ManualRollout{}},
					}
				}
				n.Store(0)
				_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
				if errors.Is(err, kit.ErrCrash) {
					crashes++
					r = nil
				} else {
					Expect(err).NotTo(HaveOccurred())
				}
				record()
			}
			Expect(done(getCluster(ctx, key))).To(BeTrue(), "the rotation makes progress one write at a time")
		}
		ready := func(c *v1alpha1.Cluster) bool {
			return meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionReady) && c.Status.ObservedGeneration == c.Generation
		}
		reconcileWithCrashes(ready)
		before := loadCAs(ctx, getCluster(ctx, key))

		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotation)).To(Succeed())
		reconcileWithCrashes(func(c *v1alpha1.Cluster) bool { return c.CARotationPhase() == v1alpha1.RotationPrepared })
		expectPrepared(ctx, getCluster(ctx, key), before)
		prepared := loadCAs(ctx, getCluster(ctx, key))

		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationCompleteCARotation)).To(Succeed())
		reconcileWithCrashes(func(c *v1alpha1.Cluster) bool { return c.CARotationPhase() == v1alpha1.RotationCompleted })
		expectOneCAEach(ctx, getCluster(ctx, key), prepared)
		for _, role := range v1alpha1.CARoles() {
			Expect(seen[role]).To(HaveLen(2), "role %s: exactly the old and one new CA ever existed", role)
		}

		By("a second rotation, aborted once Prepared: the CAs swapped back, the new ones deleted, whichever write the operator dies after")
		completed := loadCAs(ctx, getCluster(ctx, key))
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotation)).To(Succeed())
		reconcileWithCrashes(func(c *v1alpha1.Cluster) bool { return c.CARotationPhase() == v1alpha1.RotationPrepared })
		again := loadCAs(ctx, getCluster(ctx, key))
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationAbortCARotation)).To(Succeed())
		reconcileWithCrashes(func(c *v1alpha1.Cluster) bool { return c.CARotationPhase() == v1alpha1.RotationAborted })
		swappedBack := map[v1alpha1.CARole]*credentials.CAs{}
		for _, role := range v1alpha1.CARoles() {
			swappedBack[role] = &credentials.CAs{Current: completed[role].Current, Previous: again[role].Current}
			Expect(seen[role]).To(HaveLen(3), "role %s: the two rotations made one new CA each", role)
		}
		expectOneCAEach(ctx, getCluster(ctx, key), swappedBack)
		Expect(crashes).To(BeNumerically(">", 20), "the operator died after every single write")
		AddReportEntry("simulated crashes in one rotation", crashes)
		GinkgoWriter.Printf("crash test: %d crashes\n", crashes)
	})
})

var _ = Describe("A lost CA", func() {
	It("is not replaced in the middle of a rotation", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		c := createCluster(ctx, ns, "lost")
		key := client.ObjectKeyFromObject(c)
		var writes atomic.Int64
		r := &clustercontroller.Reconciler{Client: kit.CountingClient{Client: k8s, Writes: &writes, Budget: -1}, Clock: clock.RealClock{},
			Recorder: events.NewFakeRecorder(100), CAExpiryWarning: time.Hour, ManagedPollInterval: time.Second}
		reconcile := func() error {
			_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			return err
		}
		Expect(reconcile()).To(Succeed())
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotation)).To(Succeed())
		Expect(reconcile()).To(Succeed()) // records Preparing
		Expect(k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: credentials.CASecretName(c.Name, v1alpha1.CARoleEtcd)}})).To(Succeed())
		Expect(reconcile()).To(MatchError(ContainSubstring("holding the etcd CA is missing during a CA rotation (phase Preparing): restore it")))
		Expect(meta.FindStatusCondition(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionReady)).To(HaveField("Status", metav1.ConditionFalse))
		Expect(loadCAsIfPresent(ctx, getCluster(ctx, key))).NotTo(HaveKey(v1alpha1.CARoleEtcd), "no replacement CA was minted")
	})
})

// metricValue returns the value of the gauge or counter series with exactly
// the given labels, or -1 when there is none.
func metricValue(families []*dto.MetricFamily, name string, labels map[string]string) float64 {
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

// loadCAsIfPresent is loadCAs for a Cluster whose CAs may not exist yet.
func loadCAsIfPresent(ctx context.Context, c *v1alpha1.Cluster) map[v1alpha1.CARole]*credentials.CAs {
	out := map[v1alpha1.CARole]*credentials.CAs{}
	for _, role := range v1alpha1.CARoles() {
		s := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.CASecretName(c.Name, role)}, s); err != nil {
			continue
		}
		cas, err := credentials.DecodeCASecret(s)
		Expect(err).NotTo(HaveOccurred())
		out[role] = cas
	}
	return out
}

var _ = Describe("Renewal and expiry, on a fake clock", func() {
	It("renews leaf certificates after two thirds of their life and warns before a CA expires", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		c := createCluster(ctx, ns, "aging")
		key := client.ObjectKeyFromObject(c)
		fakeClock := clocktesting.NewFakeClock(time.Now())
		var writes atomic.Int64
		r := &clustercontroller.Reconciler{
			Client: kit.CountingClient{Client: k8s, Writes: &writes, Budget: -1}, Clock: fakeClock, Recorder: events.NewFakeRecorder(100),
			CAExpiryWarning: 30 * 24 * time.Hour, ManagedPollInterval: time.Second,
		}
		reconcile := func() ctrl.Result {
			GinkgoHelper()
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			Expect(err).NotTo(HaveOccurred())
			return res
		}
		reconcile()
		c = getCluster(ctx, key)
		apiserver := credentials.Certificates(c)[0]
		first, _ := loadCertificate(ctx, c, apiserver)
		cas := loadCAs(ctx, c)
		res := reconcile()
		leafLife := v1alpha1.DefaultLeafValidity
		Expect(res.RequeueAfter).To(BeNumerically("~", leafLife*2/3, time.Hour), "the next reconcile is due when the first certificate needs renewal")

		By("keeping the certificates until two thirds of their life have passed")
		fakeClock.Step(leafLife/2 - time.Hour)
		writes.Store(0)
		reconcile()
		Expect(writes.Load()).To(BeZero())

		By("renewing them from the same CA afterwards")
		fakeClock.Step(leafLife/6 + 2*time.Hour)
		reconcile()
		renewed, _ := loadCertificate(ctx, getCluster(ctx, key), apiserver)
		Expect(renewed.SerialNumber).NotTo(Equal(first.SerialNumber))
		Expect(renewed.NotBefore).To(BeTemporally("~", fakeClock.Now().Add(-pki.Backdate), time.Second))
		Expect(pki.Verify(renewed, pki.NewBundle(cas[apiserver.SignedBy].Current.Cert), x509.ExtKeyUsageServerAuth, fakeClock.Now())).To(Succeed())
		Expect(loadCAs(ctx, getCluster(ctx, key))[v1alpha1.CARoleCluster].Current.Cert.Equal(cas[v1alpha1.CARoleCluster].Current.Cert)).To(BeTrue())

		By("warning a month before the first CA expires")
		Expect(meta.IsStatusConditionFalse(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionCAExpiring)).To(BeTrue())
		fakeClock.SetTime(cas[v1alpha1.CARoleCluster].Current.Cert.NotAfter.Add(-29 * 24 * time.Hour))
		reconcile()
		expiring := meta.FindStatusCondition(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionCAExpiring)
		Expect(expiring.Status).To(Equal(metav1.ConditionTrue))
		Expect(expiring.Message).To(ContainSubstring("start a CA rotation with carousel.dev/operation=start-ca-rotation"))
	})
})
