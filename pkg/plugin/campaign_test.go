package plugin

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
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

// --wait reads through an API server that fails for a while (here one read
// answered 503) and ends once the campaign is in the phase waited for; a
// campaign deleted meanwhile ends it at once.
func TestFollowCampaignReadsAgainAfterAFailedRead(t *testing.T) {
	ctx := context.Background()
	rc := &v1alpha1.RotationCampaign{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "wave", Generation: 1},
		Status: v1alpha1.RotationCampaignStatus{Phase: v1alpha1.CampaignPrepared, Conditions: []metav1.Condition{{
			Type: v1alpha1.ConditionCampaignProgressing, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonCampaignStepDone,
			Message: "every selected Cluster (2) is Prepared", ObservedGeneration: 1}}}}
	failures := 1
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(rc).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if failures > 0 {
				failures--
				return apierrors.NewServiceUnavailable("the API server is restarting")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	var out, errOut bytes.Buffer
	e := &env{streams: genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}, campaignPoll: time.Millisecond}
	key := client.ObjectKeyFromObject(rc)
	if err := e.followCampaign(ctx, c, key, v1alpha1.CampaignPrepared, time.Minute); err != nil {
		t.Fatalf("followCampaign = %v; want it to read again after the 503 (stderr %q)", err, errOut.String())
	}
	if !strings.Contains(out.String(), "Prepared: every selected Cluster (2) is Prepared") ||
		!strings.Contains(errOut.String(), "reading rotationcampaign fleet/wave: the API server is restarting (trying again)") {
		t.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
	}

	if err := c.Delete(ctx, rc); err != nil {
		t.Fatal(err)
	}
	if err := e.followCampaign(ctx, c, key, v1alpha1.CampaignPrepared, time.Minute); err == nil || !strings.Contains(err.Error(), "was deleted") {
		t.Errorf("followCampaign of a deleted campaign = %v, want it ended", err)
	}
}

// --wait ends, with an error, at a campaign held with nothing to wait for,
// rather than waiting out its timeout.
func TestFollowCampaignEndsAtACampaignThatCannotGoOn(t *testing.T) {
	for _, reason := range []string{v1alpha1.ReasonCampaignFailedClustersLeft, v1alpha1.ReasonCampaignNoClusterSelected, v1alpha1.ReasonCampaignInvalidSpec} {
		t.Run(reason, func(t *testing.T) {
			rc := &v1alpha1.RotationCampaign{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "wave", Generation: 1},
				Status: v1alpha1.RotationCampaignStatus{Phase: v1alpha1.CampaignStarting, Conditions: []metav1.Condition{{
					Type: v1alpha1.ConditionCampaignProgressing, Status: metav1.ConditionFalse, Reason: reason, ObservedGeneration: 1}}}}
			c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(rc).Build()
			var out, errOut bytes.Buffer
			e := &env{streams: genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}, campaignPoll: time.Millisecond}
			err := e.followCampaign(context.Background(), c, client.ObjectKeyFromObject(rc), v1alpha1.CampaignPrepared, 10*time.Second)
			if err == nil || !strings.Contains(err.Error(), "is held ("+reason+": ") {
				t.Errorf("followCampaign = %v; want it ended, naming %s", err, reason)
			}
		})
	}
}
