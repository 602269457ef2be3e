package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgofeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/test/framework"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

// The in-cluster workload: a pod of the managed cluster's default service
// account, on a real kubelet. The kubelet projects into it what every pod
// gets (kube-api-access-*: a token it requests with TokenRequest and renews,
// kube-root-ca.crt, the namespace), and rewrites the files when they change.
// No container runtime runs here (fake-cri keeps containers in memory), so
// the pod's process is a goroutine of the suite that reads those files where
// the kubelet wrote them, in the node's mount namespace, and calls the API
// server with client-go configured as rest.InClusterConfig configures it: a
// bearer token file reread every minute, and a CA file that client-go
// rereads at most every five minutes (ClientsAllowCARotation).
const (
	workloadPod       = "workload-probe"
	workloadNamespace = metav1.NamespaceDefault
	// workloadUser is who the pod's token authenticates as.
	workloadUser = "system:serviceaccount:" + workloadNamespace + ":default"
)

// workload is the running pod: its node and the directory its projected
// service-account volume is mounted at, as the host reaches it.
type workload struct {
	node *framework.KubeletNode
	dir  string
}

// startWorkload creates the pod on node, waits until its kubelet runs it
// and has projected its service-account volume, and returns it.
func startWorkload(ctx context.Context, admin kubernetes.Interface, node *framework.KubeletNode) *workload {
	GinkgoHelper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: workloadNamespace, Name: workloadPod},
		Spec: corev1.PodSpec{
			NodeName:   node.Name,
			Containers: []corev1.Container{{Name: "probe", Image: "registry.invalid/carousel/workload-probe:1"}},
		},
	}
	Eventually(func(ctx context.Context) error {
		created, err := admin.CoreV1().Pods(workloadNamespace).Create(ctx, pod, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // created by an attempt that timed out
			created, err = admin.CoreV1().Pods(workloadNamespace).Get(ctx, workloadPod, metav1.GetOptions{})
		}
		if err == nil {
			pod = created
		}
		return err
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed(),
		"the service-account admission plugin admits it once kube-controller-manager created the default service account")
	var volume string
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil && strings.HasPrefix(v.Name, "kube-api-access-") {
			volume = v.Name
		}
	}
	Expect(volume).NotTo(BeEmpty(), "the service-account admission plugin adds the kube-api-access volume: %+v", pod.Spec.Volumes)
	Eventually(func(ctx context.Context) (corev1.PodPhase, error) {
		got, err := admin.CoreV1().Pods(workloadNamespace).Get(ctx, workloadPod, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return got.Status.Phase, nil
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Equal(corev1.PodRunning))
	w := &workload{node: node, dir: node.NodePath(fmt.Sprintf("/var/lib/kubelet/pods/%s/volumes/kubernetes.io~projected/%s", pod.UID, volume))}
	Eventually(func() error {
		_, err := os.Stat(w.file(corev1.ServiceAccountTokenKey))
		return err
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	return w
}

func (w *workload) file(name string) string { return filepath.Join(w.dir, name) }

// client is the pod's client: what rest.InClusterConfig returns, with the
// service-account directory where the kubelet projected it and the API
// server's endpoint, which the suite reaches (the pod would use the
// kubernetes Service, which nothing here routes).
func (w *workload) client(ctx context.Context) kubernetes.Interface {
	GinkgoHelper()
	Expect(clientgofeatures.FeatureGates().Enabled(clientgofeatures.ClientsAllowCARotation)).To(BeTrue(),
		"client-go rereads a CA file only with ClientsAllowCARotation")
	token, err := os.ReadFile(w.file(corev1.ServiceAccountTokenKey))
	Expect(err).NotTo(HaveOccurred())
	cfg := &rest.Config{
		Host:            cluster(ctx).Spec.ControlPlane.Endpoint,
		TLSClientConfig: rest.TLSClientConfig{CAFile: w.file(corev1.ServiceAccountRootCAKey)},
		BearerToken:     string(token),
		BearerTokenFile: w.file(corev1.ServiceAccountTokenKey),
		Timeout:         5 * time.Second,
	}
	cs, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	return cs
}

// projectedRootCA is the kube-root-ca.crt the kubelet last wrote into the pod.
func (w *workload) projectedRootCA() ([]string, error) {
	data, err := os.ReadFile(w.file(corev1.ServiceAccountRootCAKey))
	if err != nil {
		return nil, err
	}
	b, err := pki.ParseBundle(data)
	if err != nil {
		return nil, err
	}
	return kit.Fingerprints(b), nil
}

// whoAmI is the workload probe's request: a SelfSubjectReview, which every
// authenticated user may create, checked to come back as the pod's service
// account.
func whoAmI(ctx context.Context, cs kubernetes.Interface) error {
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if got := review.Status.UserInfo.Username; got != workloadUser {
		return fmt.Errorf("authenticated as %q, not %q", got, workloadUser)
	}
	return nil
}
