// Package integration runs Carousel's API and controllers against a real
// kube-apiserver and etcd (the test control plane of `make envtest`).
package integration

import (
	"context"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	carouselv1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

var (
	testEnv *envtest.Environment
	cfg     *rest.Config
	k8s     client.Client
	scheme  = runtime.NewScheme()
)

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Integration Suite")
}

var _ = BeforeSuite(func() {
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(carouselv1alpha1.AddToScheme(scheme)).To(Succeed())

	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "charts", "carousel", "crds")},
		ErrorIfCRDPathMissing: true,
	}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "starting the test control plane; run `make envtest` and set KUBEBUILDER_ASSETS (the Makefile does both)")
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// newNamespace creates a namespace for one spec and deletes it afterwards.
func newNamespace(ctx context.Context) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "carousel-test-"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(k8s.Delete(ctx, ns)).To(Succeed()) })
	return ns.Name
}
