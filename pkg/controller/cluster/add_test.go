package cluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCacheKeepsNoManagedFields checks that the manager's cache drops the
// managedFields of what it holds, and only them.
func TestCacheKeepsNoManagedFields(t *testing.T) {
	transform := CacheOptions().DefaultTransform
	if transform == nil {
		t.Fatal("CacheOptions sets no DefaultTransform: every cached object keeps its managedFields")
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "prod-ca-cluster", Labels: map[string]string{"carousel.dev/cluster": "prod"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "carousel-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Data: map[string][]byte{"tls.crt": []byte("certificate")},
	}
	got, err := transform(secret)
	if err != nil {
		t.Fatal(err)
	}
	cached := got.(*corev1.Secret)
	if cached.ManagedFields != nil {
		t.Errorf("cached managedFields = %v, want none", cached.ManagedFields)
	}
	if string(cached.Data["tls.crt"]) != "certificate" || cached.Labels["carousel.dev/cluster"] != "prod" {
		t.Errorf("the transform changed more than managedFields: %+v", cached)
	}
}
