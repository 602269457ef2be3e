// Package e2e holds the end-to-end suites: a management cluster running the
// Carousel controller manager, and a managed cluster whose etcd and
// kube-apiserver run on the certificates Carousel issued. The suites arrive
// with the local environment (test/framework); `make test-e2e` already runs
// this package so that wiring them in changes no build or CI step.
package e2e

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "End-to-end Suite")
}
