package integration

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/carousel-dev/carousel/pkg/operator"
)

var _ = Describe("The manager's leader election", func() {
	// A leader that kept its Lease as it stopped (controller-runtime's
	// default) left a standby waiting out the lease duration, 15 s without a
	// reconcile or a signed CSR at every rolling update.
	It("releases the Lease when the leader stops", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		opts := operator.ManagerOptions()
		opts.LeaderElection, opts.LeaderElectionID, opts.LeaderElectionNamespace = true, operator.LeaderElectionID, ns
		opts.Metrics, opts.HealthProbeBindAddress = metricsserver.Options{BindAddress: "0"}, "0"
		mgr, err := ctrl.NewManager(testEnv.Config, opts)
		Expect(err).NotTo(HaveOccurred())
		mgrCtx, stop := context.WithCancel(ctx)
		defer stop()
		stopped := make(chan error, 1)
		go func() { stopped <- mgr.Start(mgrCtx) }()
		Eventually(mgr.Elected()).WithTimeout(time.Minute).Should(BeClosed(), "the manager leads")

		lease := &coordinationv1.Lease{}
		key := client.ObjectKey{Namespace: ns, Name: operator.LeaderElectionID}
		Expect(k8s.Get(ctx, key, lease)).To(Succeed())
		Expect(lease.Spec.HolderIdentity).To(HaveValue(Not(BeEmpty())), "the leader holds the Lease")
		stop()
		Eventually(stopped).WithTimeout(time.Minute).Should(Receive(BeNil()), "the manager stopped")
		Expect(k8s.Get(ctx, key, lease)).To(Succeed())
		Expect(lease.Spec.HolderIdentity).To(Or(BeNil(), HaveValue(BeEmpty())), "the Lease released: a standby takes over at its next try")
	})
})
