package plugin

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// A pause decided on a stale read (the campaign paused there, resumed since)
// still pauses it: the patch carries the resourceVersion read, conflicts, and
// is made again on the campaign as it is.
func TestACampaignPatchOnAStaleReadIsMadeAgain(t *testing.T) {
	ctx := context.Background()
	rc := &v1alpha1.RotationCampaign{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "wave"}}
	var stale *v1alpha1.RotationCampaign
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(rc).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if stale != nil {
				stale.DeepCopyInto(obj.(*v1alpha1.RotationCampaign))
				stale = nil
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	key := client.ObjectKeyFromObject(rc)
	// The campaign was paused, and resumed since: the first read shows it paused.
	if err := c.Get(ctx, key, rc); err != nil {
		t.Fatal(err)
	}
	stale = rc.DeepCopy()
	stale.Spec.Paused = true
	rc.Spec.Paused = false
	if err := c.Update(ctx, rc); err != nil {
		t.Fatal(err)
	}

	if err := patchCampaignWith(ctx, c, key, func(rc *v1alpha1.RotationCampaign) { rc.Spec.Paused = true }); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.RotationCampaign{}
	if err := c.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if !got.Spec.Paused {
		t.Error("the campaign is not paused: the patch made on a stale read left the pause out")
	}
}
