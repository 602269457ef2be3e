package metapatch

import (
	"context"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestAnnotationsFromData(t *testing.T) {
	for _, tt := range []struct {
		name          string
		before, after map[string]string
		want          string
	}{
		{"one set, one changed, one removed, one kept", map[string]string{"a": "1", "b": "2", "c": "3"}, map[string]string{"a": "1", "b": "two", "d": "4"},
			`{"metadata":{"resourceVersion":"7","annotations":{"b":"two","c":null,"d":"4"}}}`},
		{"all removed", map[string]string{"a": "1"}, nil, `{"metadata":{"resourceVersion":"7","annotations":{"a":null}}}`},
		{"the first", nil, map[string]string{"a": "1"}, `{"metadata":{"resourceVersion":"7","annotations":{"a":"1"}}}`},
		{"nothing changed", map[string]string{"a": "1"}, map[string]string{"a": "1"}, `{"metadata":{"resourceVersion":"7","annotations":{}}}`},
	} {
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7", Annotations: tt.after}}
		got, err := AnnotationsFrom(tt.before).Data(obj)
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: %s, %v; want %s", tt.name, got, err, tt.want)
		}
	}
	if _, err := AnnotationsFrom(nil).Data(&corev1.ConfigMap{}); err == nil {
		t.Error("an object without a resourceVersion patched without the check")
	}
}

// TestAnnotationsFromPatches: the API's merge of the patch leaves the
// annotations the object was given, the others untouched, and a patch made
// from a stale read fails with a conflict.
func TestAnnotationsFromPatches(t *testing.T) {
	ctx := context.Background()
	stored := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm",
		Annotations: map[string]string{"operation": "start", "queued": "complete", "kept": "yes"}}, Data: map[string]string{"k": "v"}}
	c := fake.NewClientBuilder().WithObjects(stored).Build()
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stored), cm); err != nil {
		t.Fatal(err)
	}
	stale := cm.DeepCopy()
	before := maps.Clone(cm.Annotations)
	delete(cm.Annotations, "operation")
	cm.Annotations["queued"] = "rollout"
	if err := c.Patch(ctx, cm, AnnotationsFrom(before)); err != nil {
		t.Fatal(err)
	}
	got := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stored), got); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"queued": "rollout", "kept": "yes"}; !maps.Equal(got.Annotations, want) || got.Data["k"] != "v" {
		t.Fatalf("annotations %v, data %v; want %v and the data untouched", got.Annotations, got.Data, want)
	}
	before = maps.Clone(stale.Annotations)
	stale.Annotations["operation"] = "abort"
	if err := c.Patch(ctx, stale, AnnotationsFrom(before)); !apierrors.IsConflict(err) {
		t.Fatalf("a patch of a stale read: %v, want a conflict", err)
	}
}

// TestFinalizerRemovedKeepsAFinalizerAddedSince: removing a finalizer from a
// stale read leaves one another controller added since (a merge patch of the
// list as read would drop it), and fails, without a write, when the list
// changed under the index.
func TestFinalizerRemovedKeepsAFinalizerAddedSince(t *testing.T) {
	ctx := context.Background()
	stored := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", Finalizers: []string{"a.example/first", "carousel.dev/ours"}}}
	c := fake.NewClientBuilder().WithObjects(stored).Build()
	read := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stored), read); err != nil {
		t.Fatal(err)
	}
	stale := read.DeepCopy()
	read.Finalizers = append(read.Finalizers, "b.example/added-since")
	if err := c.Update(ctx, read); err != nil {
		t.Fatal(err)
	}
	if err := c.Patch(ctx, stale, FinalizerRemoved("carousel.dev/ours")); err != nil {
		t.Fatal(err)
	}
	got := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stored), got); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.example/first", "b.example/added-since"}; !slices.Equal(got.Finalizers, want) {
		t.Errorf("finalizers %v, want %v", got.Finalizers, want)
	}

	// The list changed under the index: the test fails, nothing is removed.
	moved := got.DeepCopy()
	moved.Finalizers = []string{"carousel.dev/ours"}
	if err := c.Patch(ctx, moved, FinalizerRemoved("carousel.dev/ours")); err == nil {
		t.Error("a finalizer removed by an index that now holds another")
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stored), got); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.example/first", "b.example/added-since"}; !slices.Equal(got.Finalizers, want) {
		t.Errorf("after the failed patch: finalizers %v, want %v", got.Finalizers, want)
	}
	if _, err := FinalizerRemoved("carousel.dev/ours").Data(&corev1.ConfigMap{}); err == nil {
		t.Error("a patch for an object without the finalizer")
	}
}

// TestFinalizerRemovedRemovesEveryCopy: a finalizer listed twice goes, both
// copies (controllerutil.RemoveFinalizer removes every one too).
func TestFinalizerRemovedRemovesEveryCopy(t *testing.T) {
	ctx := context.Background()
	stored := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm",
		Finalizers: []string{"carousel.dev/ours", "a.example/other", "carousel.dev/ours"}}}
	c := fake.NewClientBuilder().WithObjects(stored).Build()
	read := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stored), read); err != nil {
		t.Fatal(err)
	}
	if err := c.Patch(ctx, read, FinalizerRemoved("carousel.dev/ours")); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stored), read); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.example/other"}; !slices.Equal(read.Finalizers, want) {
		t.Errorf("finalizers %v, want %v", read.Finalizers, want)
	}
}
