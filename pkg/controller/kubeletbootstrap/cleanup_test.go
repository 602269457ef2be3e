package kubeletbootstrap

import (
	"context"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// TestRemoveFinalizerReadsAgainWhenTheListMoved: another controller removed
// its finalizer, listed before Carousel's, after the cache read, so the
// patch's index no longer holds Carousel's (the API server answers 422
// Invalid): the Cluster is read again past the cache and released, and the
// other controller's finalizer added meanwhile is kept.
func TestRemoveFinalizerReadsAgainWhenTheListMoved(t *testing.T) {
	ctx := context.Background()
	stored := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod",
		Finalizers: []string{"first.example/gone-since", v1alpha1.FinalizerManagedCleanup}}}
	patches := 0
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(stored).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if patches++; patches == 1 {
				// What the API server answers a JSON patch whose test fails.
				return apierrors.NewInvalid(schema.GroupKind{Group: v1alpha1.GroupName, Kind: "Cluster"}, obj.GetName(),
					field.ErrorList{field.Invalid(field.NewPath("metadata", "finalizers"), nil, "the test operation failed")})
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}).Build()
	cached := &v1alpha1.Cluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stored), cached); err != nil {
		t.Fatal(err)
	}
	latest := cached.DeepCopy()
	latest.Finalizers = []string{v1alpha1.FinalizerManagedCleanup, "second.example/added-since"}
	if err := c.Update(ctx, latest); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: c, APIReader: c}
	if err := r.removeFinalizer(ctx, cached); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.Cluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stored), got); err != nil {
		t.Fatal(err)
	}
	if want := []string{"second.example/added-since"}; !slices.Equal(got.Finalizers, want) {
		t.Errorf("finalizers %v, want %v", got.Finalizers, want)
	}
	if patches != 2 {
		t.Errorf("%d patches, want the refused one and one after reading again", patches)
	}
}
