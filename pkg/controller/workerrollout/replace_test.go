package workerrollout

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// TestRollWritesTheVersionsField: the rollout time goes where the served
// Cluster API version takes it, next to the phase it is for, and reads back.
func TestRollWritesTheVersionsField(t *testing.T) {
	at := time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)
	for version, field := range rolloutAfterField {
		t.Run(version, func(t *testing.T) {
			gvk := schema.GroupVersionKind{Group: clusterAPIGroup, Version: version, Kind: kindMachineDeployment}
			md := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": int64(2)}}}
			md.SetGroupVersionKind(gvk)
			md.SetNamespace("team-a")
			md.SetName("edge")
			c := fake.NewClientBuilder().WithObjects(md).Build()
			p := &ReplaceRollout{Management: c}
			if err := p.roll(context.Background(), md, field, "2026-11-24T19:00:00Z/Preparing", at); err != nil {
				t.Fatal(err)
			}
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(gvk)
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(md), got); err != nil {
				t.Fatal(err)
			}
			after, err := rolloutAfter(got, field)
			if err != nil || !after.Equal(at) {
				t.Fatalf("rollout time = %v, %v; want %v", after, err, at)
			}
			if a := got.GetAnnotations()[v1alpha1.AnnotationRolledFor]; a != "2026-11-24T19:00:00Z/Preparing" {
				t.Fatalf("%s = %q", v1alpha1.AnnotationRolledFor, a)
			}
			if replicas, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas"); replicas != 2 {
				t.Fatalf("spec.replicas = %d: the patch changed another field", replicas)
			}
		})
	}
}

func TestRolloutAfterRefusesATimeItCannotRead(t *testing.T) {
	md := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"rolloutAfter": "yesterday"}}}
	if _, err := rolloutAfter(md, rolloutAfterField["v1beta1"]); err == nil {
		t.Fatal("rolloutAfter accepted \"yesterday\"")
	}
	if after, err := rolloutAfter(md, rolloutAfterField["v1beta2"]); err != nil || !after.IsZero() {
		t.Fatalf("no spec.rollout.after: got %v, %v; want zero", after, err)
	}
}
