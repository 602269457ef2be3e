package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// checkVersion is a Kubernetes version the CRD's schema accepts and the webhook refuses, outside
// v1alpha1.SupportedKubernetesVersions: a refusal that names it can only come from the webhook.
const checkVersion = "1.0.0"

// Check proves that the admission webhook answers: it asks the API server to create, in dry run, a Cluster
// only the webhook refuses (an unsupported Kubernetes version) in namespace, and returns nil when the webhook
// refused it with its message. Nothing is stored. It is what the Helm chart's test runs.
func Check(ctx context.Context, c client.Client, namespace string) error {
	probe := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "carousel-webhook-check"},
		Spec:       v1alpha1.ClusterSpec{KubernetesVersion: checkVersion},
	}
	return refusedByWebhook(c.Create(ctx, probe, client.DryRunAll))
}

// refusedByWebhook says whether the answer to Check's dry-run create is the webhook's refusal.
func refusedByWebhook(err error) error {
	switch {
	case err == nil:
		return errors.New("the API server accepted a Cluster with Kubernetes version " + checkVersion +
			": no admission webhook checked it (is the ValidatingWebhookConfiguration there?)")
	case !strings.Contains(err.Error(), "denied the request"):
		return fmt.Errorf("the admission webhook did not answer: %w", err)
	case !strings.Contains(err.Error(), "spec.kubernetesVersion") || !strings.Contains(err.Error(), v1alpha1.SupportedKubernetesVersions):
		return fmt.Errorf("a webhook refused the Cluster, but not for its Kubernetes version: %w", err)
	}
	return nil
}
