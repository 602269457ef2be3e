package workerrollout

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
)

func bundleConfigMap(c *v1alpha1.Cluster, role v1alpha1.CARole, data string) client.Object {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, role)},
		Data:       map[string]string{v1alpha1.DataKeyCABundle: data},
	}
}

// TestTrustReadsBothBundles: what Carousel expects of a node names the
// cluster bundle and the kubelet bundle, each from its own ConfigMap, and
// waits (NotFound) while either is not published.
func TestTrustReadsBothBundles(t *testing.T) {
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	cluster := bundleConfigMap(c, v1alpha1.CARoleCluster, "cluster CA0+CA1")
	kubelet := bundleConfigMap(c, v1alpha1.CARoleKubelet, "kubelet CA0+CA1")
	for _, tt := range []struct {
		name     string
		objects  []client.Object
		want     noderenewal.Trust
		notFound bool
	}{
		{"both published", []client.Object{cluster, kubelet},
			noderenewal.Trust{Cluster: []byte("cluster CA0+CA1"), Kubelet: []byte("kubelet CA0+CA1")}, false},
		{"no kubelet bundle yet", []client.Object{cluster}, noderenewal.Trust{}, true},
		{"no cluster bundle yet", []client.Object{kubelet}, noderenewal.Trust{}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &InPlaceRollout{Management: fake.NewClientBuilder().WithObjects(tt.objects...).Build()}
			got, err := p.trust(context.Background(), c)
			if tt.notFound {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("trust = %v, want NotFound", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Cluster) != string(tt.want.Cluster) || string(got.Kubelet) != string(tt.want.Kubelet) {
				t.Fatalf("trust = {%q, %q}, want {%q, %q}", got.Cluster, got.Kubelet, tt.want.Cluster, tt.want.Kubelet)
			}
		})
	}
}
