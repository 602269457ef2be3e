package rotation

import (
	"errors"
	"fmt"
	"strings"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// DescribeOldCAUsage names, in one phrase, who u says still depends on the
// old CAs: the first three, and how many more.
func DescribeOldCAUsage(u *v1alpha1.OldCAUsage) string {
	names := make([]string, 0, 3)
	for _, d := range u.Dependents[:min(len(u.Dependents), 3)] {
		names = append(names, fmt.Sprintf("%s %s", d.Kind, d.Name))
	}
	list := strings.Join(names, ", ")
	if more := int(u.Total) - len(names); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	if u.Total == 1 {
		return "1 client still depends on the old CAs: " + list
	}
	return fmt.Sprintf("%d clients still depend on the old CAs: %s", u.Total, list)
}

// OldCAsUnused is the old-CA usage gate of a completion: an error naming the
// dependents when op completes the CA rotation of c (Prepared) while
// status.credentials.rotation.certificateAuthorities.oldCAUsage lists any,
// or was not evaluated yet (a Cluster Prepared before Carousel had the
// gate, until its next reconcile), unless op is forced.
func OldCAsUnused(op v1alpha1.Operation, c *v1alpha1.Cluster) error {
	rot := c.CARotation()
	if op.Verb.CAVerb() != v1alpha1.VerbCompleteCARotation || op.Force || rot == nil || rot.Phase != v1alpha1.RotationPrepared {
		return nil
	}
	if rot.OldCAUsage == nil {
		return fmt.Errorf("the old-CA usage gate has not yet worked out who still depends on the old CAs (status.credentials.rotation.certificateAuthorities.oldCAUsage): "+
			"try again in a moment, or complete anyway with %s=%s%s", v1alpha1.OperationAnnotation, op.Verb, v1alpha1.OperationForceSuffix)
	}
	if rot.OldCAUsage.Total == 0 {
		return nil
	}
	return errors.New(DescribeOldCAUsage(rot.OldCAUsage) + fmt.Sprintf(
		"; completing the rotation now would lock them out. Move them to the new CAs (kubectl carousel rotation status lists them, "+
			"status.credentials.rotation.certificateAuthorities.oldCAUsage says why), or complete anyway with %s=%s%s",
		v1alpha1.OperationAnnotation, op.Verb, v1alpha1.OperationForceSuffix))
}
