package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

func TestRefusedByWebhook(t *testing.T) {
	// What the webhook answers Check's Cluster, as the API server passes it on.
	_, refusal := Validator{}.ValidateCreate(context.Background(), &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "carousel-system", Name: "carousel-webhook-check"},
		Spec:       v1alpha1.ClusterSpec{KubernetesVersion: checkVersion},
	})
	if refusal == nil {
		t.Fatal("the validator accepts Check's Cluster")
	}
	denied := errors.New(`admission webhook "clusters.carousel.dev" denied the request: ` + refusal.Error())
	for _, tc := range []struct {
		name   string
		answer error
		want   string // in the error; empty for none
	}{
		{"the webhook refused the version", denied, ""},
		{"accepted", nil, "no admission webhook checked it"},
		{"the webhook is not reachable", errors.New(`Internal error occurred: failed calling webhook "clusters.carousel.dev": ` +
			`failed to call webhook: Post "https://carousel-webhook.carousel-system.svc:443/validate": dial tcp: connection refused`), "did not answer"},
		{"another webhook refused it", errors.New(`admission webhook "policy.example.com" denied the request: no Clusters on Fridays`), "not for its Kubernetes version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := refusedByWebhook(tc.answer)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
