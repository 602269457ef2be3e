package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

// blockedError stops a reconcile on something only a person can resolve. Its
// reason goes into the Ready condition and, once, into a Warning event; its
// message says what to do.
type blockedError struct {
	reason  string
	message string
}

func (e *blockedError) Error() string { return e.message }

func blocked(reason, format string, args ...any) error {
	return &blockedError{reason: reason, message: fmt.Sprintf(format, args...)}
}

// confirmCAMissing is asked before a role's CA is generated because the cache
// holds no Secret for it (on a new Cluster, after its create found one:
// readFirst). It reads the API server itself: a Secret the cache
// has not seen yet is errStaleCache; a Secret that lost Carousel's labels is
// invisible to the cache and must be relabelled, not replaced; and a CA that
// the status inventory lists was lost, and is replaced only through the
// reissue-ca operation, because everything it signed would stop being
// trusted. Only a CA that was never issued may be generated.
func (r *Reconciler) confirmCAMissing(ctx context.Context, c *v1alpha1.Cluster, role v1alpha1.CARole) error {
	name := credentials.CASecretName(c.Name, role)
	if err := r.confirmAbsent(ctx, c, name, credentials.CALabels(c.Name, role), fmt.Sprintf("the %s CA", role), v1alpha1.ReasonCASecretUnlabelled); err != nil {
		return err
	}
	if !inventoryLists(c, role) {
		return nil
	}
	if phase := c.CARotationPhase(); phase.RotationInProgress() {
		return blocked(v1alpha1.ReasonCALost,
			"secret %s holding the %s CA is missing during a CA rotation (phase %s): restore it (kubectl carousel certs restore); Carousel does not replace a CA mid-rotation",
			name, role, phase)
	}
	return blocked(v1alpha1.ReasonCALost,
		"secret %s holding the %s CA is missing; everything it signed depends on it. Restore it (kubectl carousel certs restore), or accept a new %s CA, which every kubelet and kubeconfig signed by or trusting the old one must then be given: %s",
		name, role, role, operationCommand(c, v1alpha1.OperationReissueCAPrefix+string(role)))
}

// readFirst reports whether a Secret the cache does not hold is read from the
// API server before its key is generated (confirmCAMissing,
// confirmServiceAccountKeyMissing): when the status says its key was issued,
// and on every Cluster a pass has recorded a status for (it has a Ready
// condition). On a new Cluster the create is the check instead: the API server
// refuses it when a Secret is there (not cached yet, or unlabelled), the key
// generated for it is dropped unstored, and the metadata of what holds the
// name is read then to say which (whatHoldsTheName; again by confirm when it
// lacks the Cluster's label: foundByCreate). That spares each new Cluster a
// read per CA and one for the service-account key; once a pass has recorded
// its status, a Secret found unlabelled costs no key in the passes that
// retry.
func readFirst(c *v1alpha1.Cluster, issued bool) bool {
	return issued || meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionReady) != nil
}

// foundByCreate is err, the outcome of creating a key's Secret the cache did
// not hold, unless the create found a Secret without the Cluster's label
// there (whatHoldsTheName): confirm (confirmCAMissing,
// confirmServiceAccountKeyMissing) then says what it is: one that may hold
// the Cluster's key is to be relabelled, never deleted; one that another
// Cluster or owner claims stays NameTaken.
func foundByCreate(err error, confirm func() error) error {
	if !nameTaken(err) {
		return err
	}
	if confirmErr := confirm(); confirmErr != nil {
		return confirmErr
	}
	return fmt.Errorf("%w (its Secret was gone when read)", errStaleCache)
}

// confirmServiceAccountKeyMissing is confirmCAMissing for the
// service-account key: a key that existed (the Cluster's credentials were
// issued with it) is replaced only through reissue-service-account-key,
// because every ServiceAccount token it signed would stop being valid.
func (r *Reconciler) confirmServiceAccountKeyMissing(ctx context.Context, c *v1alpha1.Cluster) error {
	name := credentials.ServiceAccountKeySecretName(c.Name)
	if err := r.confirmAbsent(ctx, c, name, credentials.ClusterLabels(c.Name), "the service-account key", v1alpha1.ReasonServiceAccountKeyUnlabelled); err != nil {
		return err
	}
	if !credentialsRecorded(c) {
		return nil
	}
	return blocked(v1alpha1.ReasonServiceAccountKeyLost,
		"secret %s holding the service-account key is missing; every ServiceAccount token depends on it. Restore it (kubectl carousel certs restore), or accept a new key, which invalidates every token signed by the old one: %s",
		name, operationCommand(c, v1alpha1.OperationReissueServiceAccountKey))
}

// confirmAbsent reads the API server for the metadata of a Secret the cache
// does not hold, and returns nil only when it is not there. One the cache has not seen yet
// is errStaleCache. One that another Cluster's label claims, or another
// owner controls, is NameTaken (notTheClusters). One that lost its labels
// (the cache filters on them) is blocked with unlabelledReason, a message
// naming what it holds, and the kubectl label command that puts them back.
func (r *Reconciler) confirmAbsent(ctx context.Context, c *v1alpha1.Cluster, name string, labels map[string]string, holding, unlabelledReason string) error {
	s, err := r.readMetadata(ctx, secretKind, client.ObjectKey{Namespace: c.Namespace, Name: name})
	switch {
	case err == nil && hasMeta(s.Labels, labels):
		return fmt.Errorf("secret %s: %w", name, errStaleCache)
	case err == nil:
		if err := notTheClusters("secret", s, c); err != nil {
			return err
		}
		return blocked(unlabelledReason,
			"secret %s holds %s but lacks Carousel's labels, so the operator cannot see it; put them back: kubectl label secret -n %s %s %s",
			name, holding, c.Namespace, name, labelArgs(labels))
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading secret %s: %w", name, err)
	}
	return nil
}

func (r *Reconciler) apiReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// inventoryLists reports whether the status records a CA of the role.
func inventoryLists(c *v1alpha1.Cluster, role v1alpha1.CARole) bool {
	current, _ := recordedCAs(c, role)
	return current != nil
}

// forgetCAs drops roles from the status inventory: a reissue-ca operation.
func forgetCAs(c *v1alpha1.Cluster, roles []v1alpha1.CARole) {
	if c.Status.Credentials == nil {
		return
	}
	kept := c.Status.Credentials.CertificateAuthorities[:0:0]
	for _, inv := range c.Status.Credentials.CertificateAuthorities {
		if !slices.Contains(roles, inv.Role) {
			kept = append(kept, inv)
		}
	}
	c.Status.Credentials.CertificateAuthorities = kept
}

// credentialsRecorded reports whether a pass ever recorded the Cluster's
// credentials (updateInventory, which only a pass that issued them all,
// the service-account key with them, reaches): reissue-ca drops roles from
// the inventory, not the earliest expiry recorded with them.
func credentialsRecorded(c *v1alpha1.Cluster) bool {
	return c.Status.Credentials != nil && (len(c.Status.Credentials.CertificateAuthorities) > 0 || c.Status.Credentials.EarliestCAExpiry != nil)
}

// labelArgs renders labels as kubectl label arguments, in a stable order.
func labelArgs(labels map[string]string) string {
	out := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		out = append(out, k+"="+labels[k])
	}
	return strings.Join(out, " ")
}
