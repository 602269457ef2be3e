package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds and defaults of a RotationCampaignSpec.
const (
	// DefaultCampaignProgressDeadline leaves a Cluster's phase two hours:
	// rolling its worker pools takes most of it.
	DefaultCampaignProgressDeadline = 2 * time.Hour
	MinCampaignProgressDeadline     = time.Minute
	MaxCampaignProgressDeadline     = 7 * 24 * time.Hour
	// MaxCampaignBlocking is how many Clusters status.blocking lists.
	MaxCampaignBlocking = 20
)

// ValidateRotationCampaign checks a new campaign's spec.
func ValidateRotationCampaign(c *RotationCampaign) field.ErrorList {
	p := field.NewPath("spec")
	var allErrs field.ErrorList
	if len(c.Spec.Selector.MatchLabels) == 0 && len(c.Spec.Selector.MatchExpressions) == 0 {
		allErrs = append(allErrs, field.Required(p.Child("selector"),
			"select the campaign's Clusters by label; to rotate every Cluster of the namespace, give them a label they all carry"))
	}
	allErrs = append(allErrs, metav1validation.ValidateLabelSelector(&c.Spec.Selector, metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
	if step := c.Spec.Step; step != "" && !oneOf(step, []CampaignStep{CampaignStart, CampaignComplete}) {
		allErrs = append(allErrs, field.NotSupported(p.Child("step"), step, []CampaignStep{CampaignStart, CampaignComplete}))
	}
	if v := c.Spec.MaxConcurrent; v != nil {
		allErrs = append(allErrs, validateCountOrPercent(*v, 1, p.Child("maxConcurrent"), "Clusters")...)
	}
	if v := c.Spec.MaxFailures; v != nil {
		allErrs = append(allErrs, validateCountOrPercent(*v, 0, p.Child("maxFailures"), "Clusters")...)
	}
	return append(allErrs, validateDurationBounds(c.Spec.ProgressDeadline, MinCampaignProgressDeadline, MaxCampaignProgressDeadline, p.Child("progressDeadline"))...)
}

// ValidateRotationCampaignUpdate checks a changed campaign: its spec, when
// it changed, and that its step does not go back from Complete to Start. A
// campaign stored with a spec the webhook refuses (while it was off, or
// failing open) can still be labelled, assigned to a shard and handed over:
// its controller reports the spec as invalid.
func ValidateRotationCampaignUpdate(newC, oldC *RotationCampaign) field.ErrorList {
	var allErrs field.ErrorList
	if !equality.Semantic.DeepEqual(newC.Spec, oldC.Spec) {
		allErrs = ValidateRotationCampaign(newC)
	}
	if oldC.Spec.StepOrDefault() == CampaignComplete && newC.Spec.StepOrDefault() == CampaignStart {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("spec", "step"),
			"the campaign is at the Complete step and does not go back to Start; create a new campaign to start another rotation"))
	}
	return allErrs
}

// StepOrDefault is the campaign's step; empty is Start.
func (s *RotationCampaignSpec) StepOrDefault() CampaignStep {
	if s.Step == "" {
		return CampaignStart
	}
	return s.Step
}

// MaxConcurrentOf is how many of selected Clusters may rotate at once: at
// least one.
func (s *RotationCampaignSpec) MaxConcurrentOf(selected int) int {
	if s.MaxConcurrent == nil {
		return 1
	}
	return max(1, scaled(*s.MaxConcurrent, selected, true))
}

// MaxFailuresOf is how many of selected Clusters may fail before the
// campaign halts.
func (s *RotationCampaignSpec) MaxFailuresOf(selected int) int {
	if s.MaxFailures == nil {
		return 0
	}
	return max(0, scaled(*s.MaxFailures, selected, false))
}

// ProgressDeadlineOrDefault is spec.progressDeadline, or its default, within
// [MinCampaignProgressDeadline, MaxCampaignProgressDeadline] (see boundedOr;
// the campaign controller also refuses such a spec, InvalidSpec).
func (s *RotationCampaignSpec) ProgressDeadlineOrDefault() time.Duration {
	return boundedOr(s.ProgressDeadline, DefaultCampaignProgressDeadline, MinCampaignProgressDeadline, MaxCampaignProgressDeadline)
}

// scaled is a number, or a percentage of total rounded up or down; a value
// validation refuses counts as 0.
func scaled(v intstr.IntOrString, total int, roundUp bool) int {
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, total, roundUp)
	if err != nil {
		return 0
	}
	return n
}
