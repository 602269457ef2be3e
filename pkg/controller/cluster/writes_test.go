package cluster

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// TestWriteSecretLeavesTheReadSecretAsItWas: loadObjects hands out the
// cache's own Secrets, so a write that keeps a Secret's data (here, one that
// only gives it back its owner) must not decode the API server's answer into
// the data map it read. The interceptor plays a server whose answer adds a
// key, as a mutating webhook may.
func TestWriteSecretLeavesTheReadSecretAsItWas(t *testing.T) {
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "prod", UID: "prod-uid"}}
	read := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "prod-service-account-key", Labels: map[string]string{v1alpha1.LabelCluster: "prod"}},
		Data:       map[string][]byte{"key.pem": []byte("key")},
	}
	cached := read.DeepCopy()
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(read.DeepCopy()).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := cl.Update(ctx, obj, opts...); err != nil {
				return err
			}
			obj.(*corev1.Secret).Data["added-by-the-server"] = []byte("answer")
			return nil
		},
	}).Build()}
	objs := &objects{secrets: map[string]*corev1.Secret{read.Name: read}}

	if err := r.writeSecret(context.Background(), c, objs, desiredSecret{name: read.Name, labels: read.Labels, data: read.Data}); err != nil {
		t.Fatal(err)
	}
	if !ownedBy(objs.secrets[read.Name], c) {
		t.Errorf("the written Secret is not owned by the Cluster: %v", objs.secrets[read.Name].OwnerReferences)
	}
	if !equality.Semantic.DeepEqual(read, cached) {
		t.Errorf("writing changed the Secret that was read:\n got %+v\nwant %+v", read, cached)
	}
}
