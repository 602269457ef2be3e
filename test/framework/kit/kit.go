// Package kit is the test kit every suite shares (integration, e2e, chart,
// bench): reading and annotating a Cluster, waiting for a phase or for
// Ready, loading its CAs and trust bundles, running kubectl carousel
// in-process, and a client that counts writes and injects crashes. Its
// helpers take the client explicitly and fail the running spec through
// Gomega, so a suite binds them to its own client in one line.
package kit

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/plugin"
)

// Annotate sets the operation annotation of the Cluster through the API
// server, and so through the admission webhook, whose refusal it returns.
func Annotate(ctx context.Context, c client.Client, cl *v1alpha1.Cluster, value string) error {
	patch := client.MergeFrom(cl.DeepCopy())
	latest := cl.DeepCopy()
	if latest.Annotations == nil {
		latest.Annotations = map[string]string{}
	}
	latest.Annotations[v1alpha1.OperationAnnotation] = value
	return c.Patch(ctx, latest, patch)
}

// GetCluster reads the Cluster as the API server has it now.
func GetCluster(ctx context.Context, c client.Client, key client.ObjectKey) *v1alpha1.Cluster {
	ginkgo.GinkgoHelper()
	cl := &v1alpha1.Cluster{}
	gomega.Expect(c.Get(ctx, key, cl)).To(gomega.Succeed())
	return cl
}

// Wait is how long WaitForPhase and WaitForReady wait, and how often they look.
type Wait struct {
	Timeout, Polling time.Duration
}

// Quick is the wait of the integration suite: a minute, looking often.
var Quick = Wait{Timeout: time.Minute, Polling: 10 * time.Millisecond}

// WaitForPhase waits until the Cluster is in phase with no operation
// annotation left, and returns it; a timeout shows its conditions.
func WaitForPhase(ctx context.Context, c client.Client, key client.ObjectKey, phase v1alpha1.CARotationPhase, w Wait) *v1alpha1.Cluster {
	ginkgo.GinkgoHelper()
	cl := &v1alpha1.Cluster{}
	gomega.Eventually(func(g gomega.Gomega) {
		g.Expect(c.Get(ctx, key, cl)).To(gomega.Succeed())
		g.Expect(cl.CARotationPhase()).To(gomega.Equal(phase), "%s", ConditionsText(cl))
		g.Expect(cl.Annotations).NotTo(gomega.HaveKey(v1alpha1.OperationAnnotation))
	}).WithTimeout(w.Timeout).WithPolling(w.Polling).Should(gomega.Succeed())
	return cl
}

// WaitForReady waits until the Cluster is Ready for its current generation.
func WaitForReady(ctx context.Context, c client.Client, key client.ObjectKey, w Wait) *v1alpha1.Cluster {
	ginkgo.GinkgoHelper()
	cl := &v1alpha1.Cluster{}
	gomega.Eventually(func(g gomega.Gomega) {
		g.Expect(c.Get(ctx, key, cl)).To(gomega.Succeed())
		g.Expect(meta.IsStatusConditionTrue(cl.Status.Conditions, v1alpha1.ConditionReady)).To(gomega.BeTrue(), "%s", ConditionsText(cl))
		g.Expect(cl.Status.ObservedGeneration).To(gomega.Equal(cl.Generation))
	}).WithTimeout(w.Timeout).WithPolling(w.Polling).Should(gomega.Succeed())
	return cl
}

// ConditionsText renders a Cluster's conditions, one a line, for failure messages.
func ConditionsText(cl *v1alpha1.Cluster) string {
	var out strings.Builder
	for _, cond := range cl.Status.Conditions {
		fmt.Fprintf(&out, "\n  %s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
	}
	return out.String()
}

// LoadCAs reads every role's CAs from their Secrets, checking their labels.
func LoadCAs(ctx context.Context, c client.Client, cl *v1alpha1.Cluster) map[v1alpha1.CARole]*credentials.CAs {
	ginkgo.GinkgoHelper()
	out := map[v1alpha1.CARole]*credentials.CAs{}
	for _, role := range v1alpha1.CARoles() {
		s := &corev1.Secret{}
		gomega.Expect(c.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: credentials.CASecretName(cl.Name, role)}, s)).To(gomega.Succeed())
		gomega.Expect(s.Labels).To(gomega.HaveKeyWithValue(v1alpha1.LabelCluster, cl.Name))
		gomega.Expect(s.Labels).To(gomega.HaveKeyWithValue(v1alpha1.LabelCA, string(role)))
		cas, err := credentials.DecodeCASecret(s)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		out[role] = cas
	}
	return out
}

// LoadBundle reads a role's trust-bundle ConfigMap, checking its label.
func LoadBundle(ctx context.Context, c client.Client, cl *v1alpha1.Cluster, role v1alpha1.CARole) pki.Bundle {
	ginkgo.GinkgoHelper()
	cm := &corev1.ConfigMap{}
	gomega.Expect(c.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: credentials.BundleConfigMapName(cl.Name, role)}, cm)).To(gomega.Succeed())
	gomega.Expect(cm.Labels).To(gomega.HaveKeyWithValue(v1alpha1.LabelCABundle, string(role)))
	b, err := pki.ParseBundle([]byte(cm.Data[v1alpha1.DataKeyCABundle]))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return b
}

// Fingerprints are the sorted fingerprints of a bundle's certificates.
func Fingerprints(b pki.Bundle) []string {
	out := make([]string, 0, len(b))
	for _, c := range b {
		out = append(out, pki.Fingerprint(c))
	}
	slices.Sort(out)
	return out
}

// KubectlCarousel runs kubectl carousel in-process with the kubeconfig at
// path and the plugin's clock (which decides, for example, when an upload
// expires), and returns its standard output.
func KubectlCarousel(ctx context.Context, kubeconfig string, clk clock.Clock, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := plugin.NewCommand(genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}, clk)
	if len(args) > 0 && args[0] == "__complete" {
		// The word being completed stays last.
		cmd.SetArgs(append([]string{"__complete", "--kubeconfig", kubeconfig}, args[1:]...))
	} else {
		cmd.SetArgs(append(args, "--kubeconfig", kubeconfig))
	}
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}
