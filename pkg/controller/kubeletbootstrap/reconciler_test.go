package kubeletbootstrap

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// tokenSecret is a bootstrap-token Secret as the API server returns it,
// labelled for cluster; expires empty leaves the expiration out.
func tokenSecret(cluster, id, expires string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-" + id,
			Labels: map[string]string{v1alpha1.LabelBootstrapToken: cluster}},
		Type: bootstrapapi.SecretTypeBootstrapToken,
		Data: map[string][]byte{bootstrapapi.BootstrapTokenIDKey: []byte(id), bootstrapapi.BootstrapTokenSecretKey: []byte("0123456789abcdef"),
			bootstrapapi.BootstrapTokenUsageAuthentication: []byte("true")},
	}
	if expires != "" {
		s.Data[bootstrapapi.BootstrapTokenExpirationKey] = []byte(expires)
	}
	return s
}

func TestATokenLabelledForTheClusterThatDoesNotParseIsDeleted(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	live := tokenSecret("prod", "abcdef", now.Add(c.Spec.KubeletBootstrap.TokenTTLOrDefault()).Format(time.RFC3339))
	neverExpires := tokenSecret("prod", "ghijkl", "")
	garbled := tokenSecret("prod", "mnopqr", "next tuesday")
	others := tokenSecret("other", "stuvwx", "")
	remote := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(live, neverExpires, garbled, others).Build()
	r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(now)}

	tokens, _, err := r.ensureTokens(context.Background(), c, remote)
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != 1 || tokens[0].ID != "abcdef" {
		t.Errorf("tokens = %+v, want the live one alone (and no new one)", tokens)
	}
	for _, s := range []*corev1.Secret{neverExpires, garbled} {
		if err := remote.Get(context.Background(), client.ObjectKeyFromObject(s), &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: %v, want it deleted", s.Name, err)
		}
	}
	for _, s := range []*corev1.Secret{live, others} {
		if err := remote.Get(context.Background(), client.ObjectKeyFromObject(s), &corev1.Secret{}); err != nil {
			t.Errorf("%s: %v, want it kept", s.Name, err)
		}
	}
}

// A pass is followed by another when the next token is due, at least every
// minute, and always: one that outlasted the moment the next token was due
// must not end the requeues, which would stop new tokens.
func TestLookAgainIn(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		next time.Time
		want time.Duration
	}{
		{now.Add(10 * time.Second), 10 * time.Second},
		{now.Add(2 * time.Hour), time.Minute},
		{now, time.Second},
		{now.Add(-3 * time.Second), time.Second},
	} {
		if got := lookAgainIn(tt.next, now); got != tt.want {
			t.Errorf("lookAgainIn(now%+v) = %s, want %s", tt.next.Sub(now), got, tt.want)
		}
	}
}
