// Package hostcheck holds the Ginkgo suites that start real kubelets to the
// rule that they leave the host as they found it.
package hostcheck

import (
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/carousel-dev/carousel/test/framework"
)

// ExpectUntouched takes the host's state now and registers a cleanup that
// fails the suite unless the host returns to it: no sysctl the kubelets set,
// no mount, network namespace, interface or kubelet path left behind. Call it
// before the environment's start registers its own cleanup, so that this one
// runs after the environment stopped.
func ExpectUntouched() {
	ginkgo.GinkgoHelper()
	before, err := framework.ReadHostState()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func() {
		gomega.Eventually(func() (string, error) {
			now, err := framework.ReadHostState()
			return now.Diff(before), err
		}).WithTimeout(30*time.Second).Should(gomega.BeEmpty(), "the host is as the suite found it")
	})
}
