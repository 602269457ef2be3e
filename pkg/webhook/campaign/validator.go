// Package campaign is the validating admission webhook for
// RotationCampaigns. It only calls the validation functions of the API
// package.
package campaign

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-carousel-dev-v1alpha1-rotationcampaign,mutating=false,failurePolicy=fail,sideEffects=None,groups=carousel.dev,resources=rotationcampaigns,verbs=create;update,versions=v1alpha1,name=rotationcampaigns.carousel.dev,admissionReviewVersions=v1

// Validator refuses invalid campaigns and a step that goes back.
type Validator struct{}

// SetupWithManager registers the webhook with the manager's webhook server.
func SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &v1alpha1.RotationCampaign{}).WithValidator(Validator{}).Complete()
}

// ValidateCreate validates a new campaign.
func (Validator) ValidateCreate(_ context.Context, rc *v1alpha1.RotationCampaign) (admission.Warnings, error) {
	return nil, invalid(rc, v1alpha1.ValidateRotationCampaign(rc))
}

// ValidateUpdate validates a changed campaign.
func (Validator) ValidateUpdate(_ context.Context, oldRC, newRC *v1alpha1.RotationCampaign) (admission.Warnings, error) {
	return nil, invalid(newRC, v1alpha1.ValidateRotationCampaignUpdate(newRC, oldRC))
}

// ValidateDelete allows every deletion: the Clusters already rotating go on.
func (Validator) ValidateDelete(context.Context, *v1alpha1.RotationCampaign) (admission.Warnings, error) {
	return nil, nil
}

func invalid(rc *v1alpha1.RotationCampaign, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(v1alpha1.Kind("RotationCampaign"), rc.Name, errs)
}
