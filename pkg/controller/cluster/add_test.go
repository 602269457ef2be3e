package cluster

import (
	"context"
	"maps"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/scheme"
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

// TestLoadObjectsThroughClusterIndex checks that, read through the index
// SetupWithManager registers, a Cluster's objects are its own, and all of them.
func TestLoadObjectsThroughClusterIndex(t *testing.T) {
	labelled := func(cluster string) map[string]string { return map[string]string{"carousel.dev/cluster": cluster} }
	in := func(ns, name string, labels map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}
	}
	builder := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(
		&corev1.Secret{ObjectMeta: in("fleet", "prod-ca-cluster", labelled("prod"))},
		&corev1.Secret{ObjectMeta: in("fleet", "staging-ca-cluster", labelled("staging"))},
		&corev1.Secret{ObjectMeta: in("other", "prod-ca-cluster", labelled("prod"))},
		&corev1.Secret{ObjectMeta: in("fleet", "unlabelled", nil)},
		&corev1.ConfigMap{ObjectMeta: in("fleet", "prod-ca-bundle-cluster", labelled("prod"))},
		&appsv1.Deployment{ObjectMeta: in("fleet", "prod-kube-apiserver", labelled("prod"))},
		&appsv1.StatefulSet{ObjectMeta: in("fleet", "staging-etcd", labelled("staging"))},
	)
	for _, obj := range []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}, &appsv1.Deployment{}, &appsv1.StatefulSet{}} {
		builder = builder.WithIndex(obj, clusterIndex, clusterLabel)
	}
	r := &Reconciler{Client: builder.Build(), indexedByCluster: true}
	objs, err := r.loadObjects(context.Background(), &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "prod"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Collect(maps.Keys(objs.secrets)); !slices.Equal(got, []string{"prod-ca-cluster"}) {
		t.Errorf("secrets = %v, want only prod-ca-cluster", got)
	}
	if _, ok := objs.configMaps["prod-ca-bundle-cluster"]; !ok || len(objs.configMaps) != 1 {
		t.Errorf("configMaps = %v, want only prod-ca-bundle-cluster", objs.configMaps)
	}
	if len(objs.deployments) != 1 || objs.deployments[0].Name != "prod-kube-apiserver" || len(objs.statefulSets) != 0 {
		t.Errorf("deployments = %v, statefulSets = %v, want prod-kube-apiserver and none", objs.deployments, objs.statefulSets)
	}
}
