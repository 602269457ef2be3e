// Package cluster is the validating admission webhook for Clusters. It only
// calls the validation functions of the API package (the spec) and of
// package rotation (the operation annotation and what a rotation under way
// forbids).
package cluster

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// Path is where the webhook is served.
const Path = "/validate-carousel-dev-v1alpha1-cluster"

// +kubebuilder:webhook:path=/validate-carousel-dev-v1alpha1-cluster,mutating=false,failurePolicy=fail,sideEffects=None,groups=carousel.dev,resources=clusters,verbs=create;update,versions=v1alpha1,name=clusters.carousel.dev,admissionReviewVersions=v1

// Validator refuses invalid Clusters and operations that the rotation's
// current phase does not allow.
type Validator struct{}

// SetupWithManager registers the webhook with the manager's webhook server.
func SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &v1alpha1.Cluster{}).WithValidator(Validator{}).Complete()
}

// ValidateCreate validates a new Cluster.
func (Validator) ValidateCreate(_ context.Context, c *v1alpha1.Cluster) (admission.Warnings, error) {
	return nil, invalid(c, append(v1alpha1.ValidateCluster(c), rotation.ValidateOperation(c, nil)...))
}

// ValidateUpdate validates a change to a Cluster.
func (Validator) ValidateUpdate(_ context.Context, oldC, newC *v1alpha1.Cluster) (admission.Warnings, error) {
	return nil, invalid(newC, append(v1alpha1.ValidateClusterUpdate(newC, oldC), rotation.ValidateUpdate(newC, oldC)...))
}

// ValidateDelete allows every deletion.
func (Validator) ValidateDelete(context.Context, *v1alpha1.Cluster) (admission.Warnings, error) {
	return nil, nil
}

func invalid(c *v1alpha1.Cluster, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(v1alpha1.Kind("Cluster"), c.Name, errs)
}
