package bounded

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// A managed API server may be a tenant's (the endpoint is theirs to write,
// and so are the CA keys that would verify it): what a check reads from it
// is bounded, whatever it answers, and the check fails saying why.
func TestAListIsBoundedWhateverTheServerAnswers(t *testing.T) {
	for _, tt := range []struct {
		name    string
		page    func(opts metav1.ListOptions) *corev1.NamespaceList
		wantErr string
	}{
		{"pages of nothing that never end", func(metav1.ListOptions) *corev1.NamespaceList {
			return &corev1.NamespaceList{ListMeta: metav1.ListMeta{Continue: "more"}}
		}, "past 800 pages"},
		{"more objects than a cluster holds", func(opts metav1.ListOptions) *corev1.NamespaceList {
			return &corev1.NamespaceList{ListMeta: metav1.ListMeta{Continue: "more"}, Items: make([]corev1.Namespace, opts.Limit)}
		}, "more than 100000 objects"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pages, items := 0, 0
			err := EachItem(context.Background(), func(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				pages++
				return tt.page(opts), nil
			}, func(*corev1.Namespace) { items++ })
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || pages > MaxPages || items > MaxItems {
				t.Errorf("EachItem = %v after %d pages, %d objects; want an error saying %q", err, pages, items, tt.wantErr)
			}
		})
	}
}
