package v1alpha1

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An update checks the spec only when it changed it: a campaign stored with a
// spec the webhook would refuse (it was off) can still be labelled, as a
// sharder assigns it, while a change of its spec is checked.
func TestValidateRotationCampaignUpdateChecksAChangedSpec(t *testing.T) {
	stored := &RotationCampaign{ObjectMeta: metav1.ObjectMeta{Name: "wave"}} // no selector: refused when created
	labelled := stored.DeepCopy()
	labelled.Labels = map[string]string{"shard": "a"}
	if errs := ValidateRotationCampaignUpdate(labelled, stored); len(errs) != 0 {
		t.Errorf("labelling the stored campaign: %v, want it allowed", errs)
	}
	paused := labelled.DeepCopy()
	paused.Spec.Paused = true
	if errs := ValidateRotationCampaignUpdate(paused, labelled); len(errs) != 1 || !strings.Contains(errs[0].Error(), "spec.selector: Required") {
		t.Errorf("changing its spec: %v, want the selector refused", errs)
	}
	completing := &RotationCampaign{Spec: RotationCampaignSpec{Step: CampaignComplete}}
	back := completing.DeepCopy()
	back.Spec.Step = CampaignStart
	back.Labels = map[string]string{"shard": "a"}
	if errs := ValidateRotationCampaignUpdate(back, completing); !strings.Contains(errs.ToAggregate().Error(), "does not go back to Start") {
		t.Errorf("back to Start: %v", errs)
	}
}
