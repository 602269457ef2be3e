// Package cluster is the validating admission webhook for Clusters. It only
// calls the validation functions of the API package (the spec), of package
// rotation (the operation annotation and what a rotation under way forbids)
// and of package maintenance (the maintenance window and the operation
// queued for it).
package cluster

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/maintenance"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// Path is where the webhook is served.
const Path = "/validate-carousel-dev-v1alpha1-cluster"

// +kubebuilder:webhook:path=/validate-carousel-dev-v1alpha1-cluster,mutating=false,failurePolicy=fail,sideEffects=None,groups=carousel.dev,resources=clusters,verbs=create;update,versions=v1alpha1,name=clusters.carousel.dev,admissionReviewVersions=v1

// Validator refuses invalid Clusters and operations that the rotation's
// current phase does not allow, and warns, on an update, when the
// manager's policy recommends starting or completing a CA rotation.
type Validator struct {
	// Recommendations is the manager's policy (rotation.Recommend).
	Recommendations rotation.RecommendationPolicy
	// Clock tells the time of the recommendations; nil means the real one.
	Clock clock.PassiveClock
}

// SetupWithManager registers v with the manager's webhook server.
func SetupWithManager(mgr ctrl.Manager, v Validator) error {
	return ctrl.NewWebhookManagedBy(mgr, &v1alpha1.Cluster{}).WithValidator(v).Complete()
}

// ValidateCreate validates a new Cluster.
func (Validator) ValidateCreate(_ context.Context, c *v1alpha1.Cluster) (admission.Warnings, error) {
	return nil, invalid(c, slices.Concat(v1alpha1.ValidateCluster(c), rotation.ValidateOperation(c, nil), maintenance.Validate(c)))
}

// ValidateUpdate validates a change to a Cluster and returns the policy's
// recommendation as a warning, unless the Cluster carries an operation that
// follows it, now or queued for its maintenance window.
func (v Validator) ValidateUpdate(_ context.Context, oldC, newC *v1alpha1.Cluster) (admission.Warnings, error) {
	if err := invalid(newC, slices.Concat(v1alpha1.ValidateClusterUpdate(newC, oldC), rotation.ValidateUpdate(newC, oldC), maintenance.ValidateUpdate(newC, oldC))); err != nil {
		return nil, err
	}
	clk := v.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	rec, _ := rotation.Recommend(newC.CARotation(), newC.CreationTimestamp.Time, rotation.AutomaticOf(newC), v.Recommendations, clk.Now())
	if rec == nil || rec.FollowedBy(newC.Annotations[v1alpha1.OperationAnnotation]) || rec.FollowedBy(newC.Annotations[v1alpha1.MaintenanceOperationAnnotation]) {
		return nil, nil
	}
	return admission.Warnings{fmt.Sprintf("cluster %s/%s: %s", newC.Namespace, newC.Name, rec.Message)}, nil
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
