package cluster

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// ensureCAs gives every role a CA Secret and, in Preparing, a new CA that
// belongs to this rotation, keeping the old one as previous; in Aborting it
// swaps them back (restoreOldCA). A CA is written
// (and so persisted) in the same step that generates it, before anything is
// signed with it; a restarted reconcile finds it by its rotation annotation
// and never generates a second one. A Secret that cannot be read is an error,
// never a reason to replace a CA, and a CA the status lists is never
// generated again unless a reissue-ca operation allowed it (confirmCAMissing).
func (r *Reconciler) ensureCAs(ctx context.Context, c *v1alpha1.Cluster, objs *objects) (map[v1alpha1.CARole]*credentials.CAs, error) {
	phase, id := c.CARotationPhase(), c.CARotationID()
	all := make(map[v1alpha1.CARole]*credentials.CAs, len(v1alpha1.CARoles()))
	var generated, restoredOld caList
	defer func() {
		r.caEvent(c, v1alpha1.EventCAGenerated, "Generated", generated)
		r.caEvent(c, v1alpha1.EventCARestored, "Restored the old CAs as current (the aborted new ones stay trusted until they are deleted):", restoredOld)
	}()
	for _, role := range v1alpha1.CARoles() {
		name := credentials.CASecretName(c.Name, role)
		existing := objs.secrets[name]
		var (
			cas               *credentials.CAs
			data              map[string][]byte
			created, restored bool
		)
		if existing == nil {
			// A lost, unlabelled or not-yet-cached CA is never replaced:
			// checked before a key is generated, or on a new Cluster by
			// the create (readFirst).
			if readFirst(c, inventoryLists(c, role)) {
				if err := r.confirmCAMissing(ctx, c, role); err != nil {
					return nil, err
				}
			}
			kp, err := r.newCA(c, role)
			if err != nil {
				return nil, err
			}
			cas, created = &credentials.CAs{Current: kp, Rotation: id}, true
		} else {
			decoded, err := credentials.DecodeCASecret(existing)
			if err != nil {
				return nil, err
			}
			cas, data = decoded, existing.Data
			if err := r.holdsRecordedCA(ctx, c, role, existing, cas); err != nil {
				return nil, err
			}
			if phase.Preparing() && cas.Rotation != id {
				if id == "" {
					// A hand-written status: a CA without its rotation could
					// not be told from the old one by an abort.
					return nil, fmt.Errorf("the rotation has no lastInitiationTime: refusing to generate a new %s CA that no rotation names", role)
				}
				if cas.Previous != nil {
					return nil, fmt.Errorf("secret %s still holds the previous CA of an earlier rotation; refusing to replace it", name)
				}
				if err := r.lostNewCA(ctx, c, role, existing, cas, objs); err != nil {
					return nil, err
				}
				kp, err := r.newCA(c, role)
				if err != nil {
					return nil, err
				}
				cas, data, created = &credentials.CAs{Current: kp, Previous: decoded.Current, Rotation: id}, nil, true
			}
			if phase == v1alpha1.RotationAborting {
				if restored, err = restoreOldCA(cas, id, initiatedAt(c)); err != nil {
					return nil, fmt.Errorf("secret %s: %w", name, err)
				}
				if restored {
					data = nil
				}
			}
		}
		if data == nil {
			var err error
			if data, err = credentials.EncodeCASecretData(cas); err != nil {
				return nil, err
			}
		}
		annotations := caAnnotations(cas)
		if err := r.writeSecret(ctx, c, objs, desiredSecret{
			name: name, labels: credentials.CALabels(c.Name, role), annotations: annotations, data: data,
		}); err != nil {
			if existing == nil {
				err = foundByCreate(err, func() error { return r.confirmCAMissing(ctx, c, role) })
			}
			return nil, err
		}
		if created {
			generated.add(role, cas.Current)
		}
		if restored {
			restoredOld.add(role, cas.Current)
		}
		all[role] = cas
	}
	return all, nil
}

// holdsRecordedCA refuses a role's CA Secret that holds, neither as current
// nor as previous, the CA the status inventory records as current: it was
// put back from a copy older than that CA (a backup from before the last
// rotation, say). Taken as it is, it would have Preparing generate a second
// new CA, or drop from the trust bundles the CA the certificates carry. Every
// Secret Carousel writes holds it: the status is written after the Secret,
// so a Secret one step ahead keeps it as previous (a new CA generated, an
// abort's swap) or as current (the old CA dropped). Nor does it, outside a
// rotation, hold a previous CA besides the recorded one: a copy made during
// a rotation was put back, and its previous CA, which the rotation retired
// (perhaps because its key leaked), would be trusted again, or, as the
// recorded one, have a foreign current CA sign every certificate. Nor,
// during a rotation, does it hold the recorded current CA alone, without the
// rotation's annotation, while the status records a previous one: a copy
// from before the rotation was put back in Aborting, where the recorded
// current CA is the old one again, and the new one it leaves out is still
// trusted by whatever the rotation moved to it (a Secret Carousel wrote
// without the previous CA, once it dropped it, carries the annotation). A
// cache that shows the Secret older than the API server does is behind:
// errStaleCache.
func (r *Reconciler) holdsRecordedCA(ctx context.Context, c *v1alpha1.Cluster, role v1alpha1.CARole, secret *corev1.Secret, cas *credentials.CAs) error {
	if err := r.swappedBeforeAbort(ctx, c, secret, cas); err != nil {
		return err
	}
	if err := r.previousChangedByHand(ctx, c, role, secret, cas); err != nil {
		return err
	}
	recorded, recordedPrevious := recordedCAs(c, role)
	retired := cas.Previous != nil && !c.CARotationPhase().RotationInProgress()
	holdsCurrent := recorded == nil || pki.Fingerprint(cas.Current.Cert) == recorded.Fingerprint
	fromBefore := holdsCurrent && cas.Previous == nil && recordedPrevious != nil && c.CARotationPhase().RotationInProgress() && !cas.WrittenInRotation(c)
	if !retired && !fromBefore && (holdsCurrent || cas.Previous != nil && pki.Fingerprint(cas.Previous.Cert) == recorded.Fingerprint) {
		return nil
	}
	if err := r.errIfBehind(ctx, secretKind, secret, "secret "+secret.Name); err != nil {
		return err
	}
	if retired {
		current := pki.ShortFingerprint(pki.Fingerprint(cas.Current.Cert))
		which := "once nothing uses the previous CA any more (a copy from a rotation that did not complete holds the CA its kubelets may still trust only)"
		if recorded != nil {
			which = fmt.Sprintf("if %s is the one the status records (%s)", current, pki.ShortFingerprint(recorded.Fingerprint))
		}
		return blocked(v1alpha1.ReasonCALost,
			"secret %s holds, besides %s CA %s, a previous CA %s that no rotation keeps: it was put back from a copy made during a rotation. "+
				"Carousel does not trust again a CA that a rotation retired (reissue-ca neither): delete the keys %s and %s from it %s, "+
				"or else restore it from an upload made since (kubectl carousel certs restore)",
			secret.Name, role, current, pki.ShortFingerprint(pki.Fingerprint(cas.Previous.Cert)),
			credentials.DataKeyPreviousCertificate, credentials.DataKeyPreviousPrivateKey, which)
	}
	next := "delete it, then restore it from an upload made since (kubectl carousel certs restore, which refuses an older one)"
	if fromBefore {
		return blocked(v1alpha1.ReasonCALost,
			"secret %s holds %s CA %s alone, without the annotations of the rotation under way, while the status records %s as the previous "+
				"CA, which the rotation still trusts: it was put back from a copy made before the rotation, and would drop that CA from the "+
				"trust bundles. Carousel takes it as it is neither: %s",
			secret.Name, role, pki.ShortFingerprint(pki.Fingerprint(cas.Current.Cert)), pki.ShortFingerprint(recordedPrevious.Fingerprint), next)
	}
	if !c.CARotationPhase().RotationInProgress() {
		next += "; without one, keep the CA it holds in place of the recorded one: " + operationCommand(c, v1alpha1.OperationReissueCAPrefix+string(role))
	}
	return blocked(v1alpha1.ReasonCALost,
		"secret %s holds %s CA %s, but the status records %s, valid from %s, as the current one: it was put back from an older copy. "+
			"Carousel neither generates another CA nor goes back to an older one: %s",
		secret.Name, role, pki.ShortFingerprint(pki.Fingerprint(cas.Current.Cert)), pki.ShortFingerprint(recorded.Fingerprint),
		recorded.NotBefore.UTC().Format(time.RFC3339), next)
}

// previousChangedByHand refuses, while both CAs are trusted (Preparing to
// Prepared), a CA Secret of the rotation under way that holds the CA the
// status records as current, but not, as previous, the one it records as
// previous. Carousel drops a previous CA only in Finalizing and Aborting, so
// it was removed or replaced by hand. Taken as it is, the trust bundles would
// drop the old CA that the servers' certificates still chain to (removed),
// or trust a CA no rotation made, which would sign those certificates
// (replaced). One removed beside a Cluster the API server has otherwise is a
// cache whose Clusters are behind its Secrets (the manager that completed
// the rotation dropped it), and the pass is retried (errStaleCache).
func (r *Reconciler) previousChangedByHand(ctx context.Context, c *v1alpha1.Cluster, role v1alpha1.CARole, secret *corev1.Secret, cas *credentials.CAs) error {
	recorded, recordedPrevious := recordedCAs(c, role)
	if !c.CARotationPhase().BothCAsTrusted() || !cas.WrittenInRotation(c) || recorded == nil || recordedPrevious == nil ||
		pki.Fingerprint(cas.Current.Cert) != recorded.Fingerprint {
		return nil
	}
	if cas.Previous != nil && pki.Fingerprint(cas.Previous.Cert) == recordedPrevious.Fingerprint {
		return nil
	}
	if cas.Previous == nil {
		if err := r.errIfBehind(ctx, clusterKind, c, "secret "+secret.Name+", without the previous CA the Cluster as read records"); err != nil {
			return err
		}
		return blocked(v1alpha1.ReasonCALost,
			"secret %s holds %s CA %s of the rotation under way without the previous CA %s, which the status records and the rotation still trusts: "+
				"it was removed by hand, and the trust bundles would drop the CA the servers' certificates chain to. "+
				"Carousel takes it as it is neither: put it back as it was (kubectl carousel certs restore, from an upload made during the rotation)",
			secret.Name, role, pki.ShortFingerprint(recorded.Fingerprint), pki.ShortFingerprint(recordedPrevious.Fingerprint))
	}
	return blocked(v1alpha1.ReasonCALost,
		"secret %s holds, besides %s CA %s of the rotation under way, a previous CA %s, but the status records %s as the previous CA: "+
			"it was replaced by hand. Carousel neither trusts nor signs with a CA that no rotation made: "+
			"put it back as it was (kubectl carousel certs restore, from an upload made during the rotation)",
		secret.Name, role, pki.ShortFingerprint(recorded.Fingerprint), pki.ShortFingerprint(pki.Fingerprint(cas.Previous.Cert)),
		pki.ShortFingerprint(recordedPrevious.Fingerprint))
}

// lostNewCA refuses to generate a role's new CA in Preparing while the
// role's trust bundle lists a CA minted since the rotation started that the
// Secret does not hold. A pass writes the bundles after the CAs and before
// it signs anything, so that is the new CA a pass of this rotation wrote,
// and may have signed certificates with, before the Secret was put back
// from a copy made before the rotation. holdsRecordedCA cannot tell while
// the status does not record that CA yet (the passes since kept failing
// after they signed). A second new CA would drop the first from the trust
// bundles, leaving what it signed untrusted, and its key lost. A cache that
// shows the Secret or the bundle older than the API server does is behind
// (errStaleCache). A restore of the whole namespace, the bundle with the
// Secret, goes unseen.
func (r *Reconciler) lostNewCA(ctx context.Context, c *v1alpha1.Cluster, role v1alpha1.CARole, secret *corev1.Secret, cas *credentials.CAs, objs *objects) error {
	name := credentials.BundleConfigMapName(c.Name, role)
	bundle := objs.configMaps[name]
	if bundle == nil {
		return nil
	}
	// One that does not parse is rewritten by this pass, and never led
	// anything to trust a CA.
	trusted, err := pki.ParseBundle([]byte(bundle.Data[v1alpha1.DataKeyCABundle]))
	if err != nil {
		return nil
	}
	i := slices.IndexFunc(trusted, func(ca *x509.Certificate) bool {
		return !ca.Equal(cas.Current.Cert) && mintedSince(ca, initiatedAt(c))
	})
	if i < 0 {
		return nil
	}
	if err := r.errIfBehind(ctx, secretKind, secret, "secret "+secret.Name); err != nil {
		return err
	}
	if err := r.errIfBehind(ctx, configMapKind, bundle, "configmap "+name); err != nil {
		return err
	}
	return blocked(v1alpha1.ReasonCALost,
		"secret %s holds %s CA %s alone, without the annotations of the rotation under way, while the trust bundle %s lists CA %s, "+
			"which this rotation generated and may have signed certificates with: the Secret was put back from a copy made before the rotation. "+
			"Carousel does not generate another new CA, which would leave what that one signed untrusted: "+
			"delete the Secret, then restore it from an upload made since (kubectl carousel certs restore, which refuses an older one)",
		secret.Name, role, pki.ShortFingerprint(pki.Fingerprint(cas.Current.Cert)), name, pki.ShortFingerprint(pki.Fingerprint(trusted[i])))
}

// swappedBeforeAbort refuses a CA Secret that an abort of the rotation under
// way swapped back (Restored, with its rotation's annotation) while the
// Cluster is in another phase of that rotation than Aborting. The abort is
// recorded in the status before any Secret is swapped, so the Cluster as
// read is older than the Secret: a cache whose Clusters are behind its
// Secrets (a manager that took over from the one that aborted), and the pass
// is retried (errStaleCache). Taken as it is, the swapped Secret's previous
// CA, the aborted new one, would sign what the phase signs with the old CA
// (Prepared: every server certificate). A Cluster the API server has as read
// means the Secret was edited by hand.
func (r *Reconciler) swappedBeforeAbort(ctx context.Context, c *v1alpha1.Cluster, secret *corev1.Secret, cas *credentials.CAs) error {
	phase := c.CARotationPhase()
	if !cas.Restored() || !cas.WrittenInRotation(c) || !phase.RotationInProgress() || phase == v1alpha1.RotationAborting {
		return nil
	}
	if err := r.errIfBehind(ctx, clusterKind, c, "secret "+secret.Name+", swapped back by an abort the Cluster does not show yet"); err != nil {
		return err
	}
	return blocked(v1alpha1.ReasonCALost,
		"secret %s is marked as swapped back by an abort of rotation %s (annotation %s), but the Cluster is in phase %s of that rotation: "+
			"it was edited by hand. Carousel takes it as it is neither: put it back as it was (kubectl carousel certs restore), or abort the rotation",
		secret.Name, cas.Rotation, v1alpha1.AnnotationAbortedRotation, phase)
}

// recordedCAs are the current and previous CAs of role in the status
// inventory; nil when it lists none.
func recordedCAs(c *v1alpha1.Cluster, role v1alpha1.CARole) (current, previous *v1alpha1.CertificateInfo) {
	if c.Status.Credentials == nil {
		return nil, nil
	}
	for _, inv := range c.Status.Credentials.CertificateAuthorities {
		if inv.Role == role {
			return inv.Current, inv.Previous
		}
	}
	return nil, nil
}

// restoreOldCA swaps, in place, the CAs of a role in the aborted rotation
// id, unless they were swapped already: the old CA is current again and the
// new one previous, still trusted until it is deleted. It reports whether it
// swapped them. A previous CA exists only during a rotation (Preparing
// refuses to start over one), and the Secret says which rotation made its
// current CA (Rotation) and whether that one was aborted (AbortedRotation).
// A role the abort came before has no previous CA and keeps its CA as it is.
// A Secret that does not say, or names another rotation than id (restored
// from a copy of another rotation), is an error: swapping it might bring
// back a CA no longer in use and delete the one in use. One whose current
// CA was minted before the rotation started, at started, and whose previous
// one after (swappedAlready) was swapped already, whatever its annotations
// say: put back by hand without carousel.dev/aborted-rotation, it gets the
// annotation back and keeps its CAs, for a swap would make the aborted CA
// current and have the abort delete the old one.
func restoreOldCA(cas *credentials.CAs, id string, started time.Time) (bool, error) {
	switch {
	case cas.Previous == nil || cas.Restored():
		return false, nil
	case cas.Rotation == "":
		return false, fmt.Errorf("it holds two CAs but no %s annotation: which of them this rotation made is unknown; "+
			"restore the Secret as it was, or put the annotation back", v1alpha1.AnnotationRotation)
	case id != "" && cas.Rotation != id:
		return false, fmt.Errorf("its CAs are from rotation %s, not from the one aborted (%s): refusing to swap them; restore the Secret of this rotation",
			cas.Rotation, id)
	case swappedAlready(cas, started):
		cas.AbortedRotation = cas.Rotation
		return false, nil
	}
	cas.Current, cas.Previous, cas.AbortedRotation = cas.Previous, cas.Current, cas.Rotation
	return true, nil
}

// mintSkew is how far behind the clock of the replica that started a
// rotation the clock of one that minted its new CAs may be.
const mintSkew = time.Minute

// swappedAlready says whether cas, two CAs of a role in a rotation that
// started at started (zero when unknown), are the old CA as current and the
// rotation's new one as previous. A CA the rotation minted is valid from
// pki.Backdate before it was minted, after the start; the old CA was minted
// before. An old CA valid from less than pki.Backdate and mintSkew before
// the start cannot be told apart so: the annotations say.
func swappedAlready(cas *credentials.CAs, started time.Time) bool {
	if started.IsZero() {
		return false
	}
	return !mintedSince(cas.Current.Cert, started) && mintedSince(cas.Previous.Cert, started)
}

// mintedSince reports whether ca was minted since a rotation that started at
// started (by the clock of the replica that recorded it): a new CA of that
// rotation.
func mintedSince(ca *x509.Certificate, started time.Time) bool {
	return !ca.NotBefore.Before(started.Add(-pki.Backdate - mintSkew))
}

// initiatedAt is when c's rotation started; zero when its status does not
// say.
func initiatedAt(c *v1alpha1.Cluster) time.Time {
	if rot := c.CARotation(); rot != nil && rot.LastInitiationTime != nil {
		return rot.LastInitiationTime.Time
	}
	return time.Time{}
}

// caAnnotations are the annotations of a role's CA Secret: the rotation
// that gave it its CA, and the one that was aborted, if any.
func caAnnotations(cas *credentials.CAs) map[string]string {
	annotations := map[string]string{}
	if cas.Rotation != "" {
		annotations[v1alpha1.AnnotationRotation] = cas.Rotation
	}
	if cas.AbortedRotation != "" {
		annotations[v1alpha1.AnnotationAbortedRotation] = cas.AbortedRotation
	}
	return annotations
}

func (r *Reconciler) newCA(c *v1alpha1.Cluster, role v1alpha1.CARole) (*pki.KeyPair, error) {
	key, err := pki.GenerateKey(pki.KeyAlgorithm(c.Spec.Certificates.KeyAlgorithmOrDefault()))
	if err != nil {
		return nil, err
	}
	now := r.Clock.Now()
	return pki.NewCA(pki.CATemplate{
		CommonName:   fmt.Sprintf("carousel-%s-ca@%d", role, now.Unix()),
		Organization: []string{v1alpha1.GroupName},
		Validity:     c.Spec.Certificates.CAValidityOrDefault(),
	}, key, now)
}

// dropOldCAs deletes the previous CA, key and certificate, of every role:
// the old CAs in Finalizing, the aborted new ones in Aborting.
func (r *Reconciler) dropOldCAs(ctx context.Context, c *v1alpha1.Cluster, objs *objects, all map[v1alpha1.CARole]*credentials.CAs) error {
	var removed caList
	defer func() {
		which := "old"
		if c.CARotationPhase() == v1alpha1.RotationAborting {
			which = "aborted new"
		}
		r.caEvent(c, v1alpha1.EventCARemoved, "Removed the "+which+" CAs:", removed)
	}()
	for _, role := range v1alpha1.CARoles() {
		cas := all[role]
		if cas.Previous == nil {
			continue
		}
		old := cas.Previous
		kept := &credentials.CAs{Current: cas.Current, Rotation: cas.Rotation, AbortedRotation: cas.AbortedRotation}
		data, err := credentials.EncodeCASecretData(kept)
		if err != nil {
			return err
		}
		name := credentials.CASecretName(c.Name, role)
		if err := r.writeSecret(ctx, c, objs, desiredSecret{
			name: name, labels: credentials.CALabels(c.Name, role), annotations: caAnnotations(kept), data: data,
		}); err != nil {
			return err
		}
		all[role] = kept
		removed.add(role, old)
	}
	return nil
}

// caList names the CAs one step of a reconcile acted on, a role and a
// fingerprint each, for one event. The events library (k8s.io/client-go
// tools/events) keys an event by its type, reason, action, regarding and
// related objects, not by its note: a second event of one reason about the
// same version of a Cluster only counts up the first one's series, so one
// event per role would show the first role alone. Seven roles' names and
// fingerprints stay within an event note's 1 kB.
type caList []string

func (l *caList) add(role v1alpha1.CARole, ca *pki.KeyPair) {
	*l = append(*l, fmt.Sprintf("%s CA %s", role, pki.Fingerprint(ca.Cert)))
}

// caEvent records one event for the CAs of list, if any, after what.
func (r *Reconciler) caEvent(c *v1alpha1.Cluster, reason, what string, list caList) {
	if len(list) > 0 {
		r.event(c, corev1.EventTypeNormal, reason, "%s %s", what, strings.Join(list, ", "))
	}
}

// ensureServiceAccountKey creates the service-account signing key with the
// Cluster's first credentials; it is not part of the CA rotation and never
// regenerated by itself (confirmServiceAccountKeyMissing).
func (r *Reconciler) ensureServiceAccountKey(ctx context.Context, c *v1alpha1.Cluster, objs *objects) error {
	name := credentials.ServiceAccountKeySecretName(c.Name)
	existing := objs.secrets[name]
	if existing != nil {
		return r.writeSecret(ctx, c, objs, desiredSecret{name: name, labels: credentials.ClusterLabels(c.Name), data: existing.Data})
	}
	if readFirst(c, credentialsRecorded(c)) {
		if err := r.confirmServiceAccountKeyMissing(ctx, c); err != nil {
			return err
		}
	}
	data, err := newServiceAccountKey(c)
	if err != nil {
		return err
	}
	err = r.writeSecret(ctx, c, objs, desiredSecret{name: name, labels: credentials.ClusterLabels(c.Name), data: data})
	return foundByCreate(err, func() error { return r.confirmServiceAccountKeyMissing(ctx, c) })
}

// newServiceAccountKey is the data of a new service-account key Secret.
func newServiceAccountKey(c *v1alpha1.Cluster) (map[string][]byte, error) {
	key, err := pki.GenerateKey(pki.KeyAlgorithm(c.Spec.Certificates.KeyAlgorithmOrDefault()))
	if err != nil {
		return nil, err
	}
	keyPEM, err := pki.EncodePrivateKey(key)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		credentials.DataKeyServiceAccountKey:       keyPEM,
		credentials.DataKeyServiceAccountPublicKey: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}),
	}, nil
}

// reissueServiceAccountKey carries out reissue-service-account-key: it writes
// a new key when, and only when, the API server holds none. A Secret being
// deleted, or one written between the read and the create, has the
// operation tried again (it is not recorded): the next try finds the key that
// is there, or none.
func (r *Reconciler) reissueServiceAccountKey(ctx context.Context, c *v1alpha1.Cluster) error {
	name := credentials.ServiceAccountKeySecretName(c.Name)
	switch there, err := r.readMetadata(ctx, secretKind, client.ObjectKey{Namespace: c.Namespace, Name: name}); {
	case err == nil && there.DeletionTimestamp == nil:
		return nil // there is a key, nothing to replace
	case err == nil:
		return fmt.Errorf("secret %s is being deleted (finalizers %v); waiting for it to go", name, there.Finalizers)
	case !apierrors.IsNotFound(err):
		return err
	}
	data, err := newServiceAccountKey(c)
	if err != nil {
		return err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: credentials.ClusterLabels(c.Name)},
		Type: corev1.SecretTypeOpaque, Data: data}
	if rot := c.ServiceAccountKeyRotation(); rot == nil || !rot.Phase.RotationInProgress() {
		// Newer than the last key rotation, as a key that rotation staged:
		// kubectl carousel certs restore takes a copy of it
		// (LastServiceAccountKeyRotationID). A rotation under way stages a
		// key of its own, which the annotation would say it had done.
		if id := rotation.LastServiceAccountKeyRotationID(rot); id != "" {
			s.Annotations = map[string]string{v1alpha1.AnnotationRotation: id}
		}
	}
	if err := r.createOrUpdate(ctx, c, s, false); err != nil {
		return fmt.Errorf("writing the new key: %w", err)
	}
	r.event(c, corev1.EventTypeWarning, v1alpha1.EventServiceAccountKeyReissued,
		"Operation %q accepted: a new service-account key; tokens signed by the lost one are no longer valid", v1alpha1.VerbReissueServiceAccountKey)
	return nil
}
