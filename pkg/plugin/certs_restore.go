package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/rotation"
	"github.com/carousel-dev/carousel/pkg/shellquote"
)

// restoreAction is what `certs restore` does with one uploaded Secret.
type restoreAction int

const (
	// restoreCreate: the Secret is missing and is created as uploaded.
	restoreCreate restoreAction = iota
	// keepSame: the Secret exists with the uploaded data.
	keepSame
	// keepDiffers: the Secret exists with other data; it is left alone.
	keepDiffers
	// keepRaced: the Secret was created by someone else while restoring.
	keepRaced
	// keepMetadataLost: the Secret exists with the uploaded data, but
	// without some of the uploaded carousel.dev/ labels or annotations,
	// which Carousel reads (a CA Secret that lost carousel.dev/cluster blocks its
	// Cluster); it is left alone, and the command says how to put them back.
	keepMetadataLost
)

// restoreStep is the decision for one uploaded Secret.
type restoreStep struct {
	secret uploadedSecret
	action restoreAction
	// lostLabels and lostAnnotations are, for keepMetadataLost, the
	// uploaded ones the existing Secret lacks (or, labels, holds with other
	// values).
	lostLabels, lostAnnotations map[string]string
}

// parseRoles reads --role: no roles means every CA role and the
// service-account key; named roles mean those CA Secrets only.
func parseRoles(names []string) (roles []v1alpha1.CARole, withServiceAccountKey bool, err error) {
	if len(names) == 0 {
		return v1alpha1.CARoles(), true, nil
	}
	known := v1alpha1.CARoles()
	want := map[v1alpha1.CARole]bool{}
	for _, name := range names {
		role := v1alpha1.CARole(strings.TrimSpace(name))
		if !slices.Contains(known, role) {
			all := make([]string, len(known))
			for i, r := range known {
				all[i] = string(r)
			}
			return nil, false, fmt.Errorf("unknown role %q in --role: the CA roles are %s", name, strings.Join(all, ", "))
		}
		want[role] = true
	}
	for _, role := range known {
		if want[role] {
			roles = append(roles, role)
		}
	}
	return roles, false, nil
}

// planRestore decides, for each CA role asked for (and the service-account
// key), whether its uploaded Secret is created or the existing one kept.
// existing holds the Secrets the API server has now, by name, whatever their
// labels: an existing Secret is never written. It refuses an upload that
// lacks a role asked for, names a Secret of another Cluster, or holds a CA
// that is older than the one the Cluster's status records, before anything
// is written.
func planRestore(cl *v1alpha1.Cluster, uploaded []uploadedSecret, roles []v1alpha1.CARole, withServiceAccountKey bool, existing map[string]*corev1.Secret) ([]restoreStep, error) {
	var steps []restoreStep
	decide := func(s uploadedSecret, want string) (restoreStep, bool, error) {
		if s.Name != want {
			return restoreStep{}, false, fmt.Errorf("the upload names Secret %q where %q was expected", s.Name, want)
		}
		have := existing[s.Name]
		switch {
		case have == nil:
			return restoreStep{secret: s, action: restoreCreate}, true, nil
		case maps.EqualFunc(have.Data, s.Data, bytes.Equal):
			step := restoreStep{secret: s, action: keepSame, lostLabels: lost(s.Labels, have.Labels, true), lostAnnotations: lost(s.Annotations, have.Annotations, false)}
			if len(step.lostLabels) > 0 || len(step.lostAnnotations) > 0 {
				step.action = keepMetadataLost
			}
			return step, false, nil
		default:
			return restoreStep{secret: s, action: keepDiffers}, false, nil
		}
	}
	for _, role := range roles {
		i := slices.IndexFunc(uploaded, func(s uploadedSecret) bool { return s.Role == role })
		if i < 0 {
			return nil, fmt.Errorf("the upload holds no %s CA", role)
		}
		step, create, err := decide(uploaded[i], credentials.CASecretName(cl.Name, role))
		if err != nil {
			return nil, err
		}
		if create {
			if err := checkUploadedCA(cl, role, uploaded[i]); err != nil {
				return nil, err
			}
		}
		steps = append(steps, step)
	}
	if withServiceAccountKey {
		// An upload made while the Cluster had no service-account key has none.
		if i := slices.IndexFunc(uploaded, isServiceAccountKey); i >= 0 {
			step, create, err := decide(uploaded[i], credentials.ServiceAccountKeySecretName(cl.Name))
			if err != nil {
				return nil, err
			}
			if create {
				if err := checkUploadedServiceAccountKey(cl, uploaded[i]); err != nil {
					return nil, err
				}
			}
			steps = append(steps, step)
		}
	}
	return steps, nil
}

// lost is what of want's carousel.dev/ keys, which Carousel reads, have
// lacks or, when changed counts, holds with another value. A CA Secret's
// labels never change; its annotations do with the same data (an abort
// puts the old CA back alone, under the aborted rotation's annotations), and
// the uploaded values would then be stale.
func lost(want, have map[string]string, changed bool) map[string]string {
	var out map[string]string
	for k, v := range want {
		if got, ok := have[k]; strings.HasPrefix(k, v1alpha1.GroupName+"/") && (!ok || changed && got != v) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// checkUploadedCA refuses an uploaded CA Secret that is not the latest state
// of the role: restoring an older one would bring back a CA the Cluster no
// longer uses (one replaced by a rotation or a reissue, or an old CA already
// dropped) and, mid-rotation, make the operator generate another new CA. The
// status inventory is written after the Secret, so it may be one step behind
// it: the upload may hold the rotation's new CA that the status does not list
// yet, or no longer hold the old CA that the status still lists.
func checkUploadedCA(cl *v1alpha1.Cluster, role v1alpha1.CARole, s uploadedSecret) error {
	cas, err := credentials.DecodeCASecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Annotations: s.Annotations}, Data: s.Data})
	if err != nil {
		return fmt.Errorf("the upload's %s CA: %w", role, err)
	}
	inv := inventoryOf(cl, role)
	if inv == nil || inv.Current == nil {
		return nil // nothing recorded to compare with
	}
	upCur, upPrev := pki.Fingerprint(cas.Current.Cert), ""
	if cas.Previous != nil {
		upPrev = pki.Fingerprint(cas.Previous.Cert)
	}
	invCur, invPrev := inv.Current.Fingerprint, ""
	if inv.Previous != nil {
		invPrev = inv.Previous.Fingerprint
	}
	id := cl.CARotationID()
	switch {
	case upCur == invCur && upPrev == invPrev:
		return nil
	case upCur == invCur && upPrev == "" && (id == "" || cas.Rotation == id):
		// The previous CA (the old one in Finalizing, the aborted new one in
		// Aborting) was dropped after the status was written: the Secret
		// Carousel wrote then carries the rotation's annotation. A copy from
		// before the rotation holds the old CA alone too, without it, and
		// in Aborting would drop the new CA while it is still trusted.
		return nil
	case invPrev == "" && upPrev == invCur && id != "" && cas.Rotation == id && cl.CARotationPhase().BothCAsTrusted():
		// this rotation's new CA, not yet in the status; once the rotation is
		// aborted, a CA the abort deletes is never brought back
		return nil
	case upCur == invPrev && upPrev == invCur && id != "" && cas.Rotation == id && cl.CARotationPhase() == v1alpha1.RotationAborting:
		// this rotation's CAs from before the abort swapped them, which the
		// operator swaps again
		return nil
	}
	return fmt.Errorf("refusing to restore the %s CA: the upload holds CA %s%s, but the Cluster's status records CA %s%s. "+
		"The copy was made before a later rotation or reissue, and restoring it would bring back a CA the Cluster no longer uses; "+
		"restore from a newer upload, leave this role out with --role, or accept a new CA (reissue-ca, outside a rotation)",
		role, pki.ShortFingerprint(upCur), previousNote(upPrev), pki.ShortFingerprint(invCur), previousNote(invPrev))
}

// checkUploadedServiceAccountKey refuses an uploaded service-account key
// Secret made before the Cluster's last key rotation began: the rotation's
// new key may sign tokens already, and restoring the copy would bring back
// the old key alone (and, mid-rotation, make the operator generate another
// new one), so that every token the lost key signed stops being valid. A key
// Secret carries the rotation's carousel.dev/rotation annotation from the
// moment the rotation stages its new key on, which the status records as
// lastInitiationTime. A copy made during the last rotation carries it too,
// so its stage must be one the rotation's phase may be in
// (restorableServiceAccountKeyStages): a copy of a Staged Secret restored
// once the rotation completed would have the retired key sign tokens again.
// The status records no key ID, so a key replaced with
// reissue-service-account-key after the upload is not caught here.
func checkUploadedServiceAccountKey(cl *v1alpha1.Cluster, s uploadedSecret) error {
	rot := cl.ServiceAccountKeyRotation()
	id := rotation.LastServiceAccountKeyRotationID(rot)
	if id == "" {
		return nil // never rotated
	}
	if s.Annotations[v1alpha1.AnnotationRotation] == id {
		key, err := credentials.ParseServiceAccountKey(s.Data)
		if err != nil {
			return fmt.Errorf("the upload's service-account key: %w", err)
		}
		stages := restorableServiceAccountKeyStages(rot)
		if slices.Contains(stages, key.Stage()) {
			return nil
		}
		return fmt.Errorf("refusing to restore the service-account key: the copy, made in the service-account key rotation started %s, "+
			"holds the key Secret %s, but in phase %s it can only be %s; restoring it would have the old key sign or verify tokens again. "+
			"Restore from a newer upload, leave the key out with --role, "+
			"or accept a new key (reissue-service-account-key), which invalidates every token the lost key signed",
			id, key.Stage(), rot.Phase, joinStages(stages))
	}
	made := "before any"
	if upload := s.Annotations[v1alpha1.AnnotationRotation]; upload != "" {
		made = "in the one of " + upload + ", before the"
	}
	return fmt.Errorf("refusing to restore the service-account key: the copy was made %s service-account key rotation the Cluster's status records (started %s, %s), "+
		"whose new key may sign tokens already; restoring it would bring back a key the Cluster no longer uses. "+
		"Restore from a newer upload, leave the key out with --role, or accept a new key (reissue-service-account-key), which invalidates every token the lost key signed",
		made, id, rot.Phase)
}

// restorableServiceAccountKeyStages are the stages the key Secret of a
// service-account key rotation may be restored in, by the rotation's phase:
// those the Secret passes through in it, from the one the status shows it
// reached on. In Preparing, once the new key signed everywhere
// (newKeySigningTime), the workload token refresh is counted from then, so
// the old key must not sign again; in Prepared and Completed the Secret does
// not move on its own.
func restorableServiceAccountKeyStages(rot *v1alpha1.ServiceAccountKeyRotation) []credentials.ServiceAccountKeyStage {
	switch rot.Phase {
	case v1alpha1.ServiceAccountKeyPreparing:
		if rot.NewKeySigningTime == nil {
			return []credentials.ServiceAccountKeyStage{credentials.ServiceAccountKeyStaged, credentials.ServiceAccountKeySwitched}
		}
		return []credentials.ServiceAccountKeyStage{credentials.ServiceAccountKeySwitched}
	case v1alpha1.ServiceAccountKeyPrepared:
		return []credentials.ServiceAccountKeyStage{credentials.ServiceAccountKeySwitched}
	case v1alpha1.ServiceAccountKeyFinalizing:
		return []credentials.ServiceAccountKeyStage{credentials.ServiceAccountKeySwitched, credentials.ServiceAccountKeySingle}
	}
	return []credentials.ServiceAccountKeyStage{credentials.ServiceAccountKeySingle}
}

func joinStages(stages []credentials.ServiceAccountKeyStage) string {
	names := make([]string, len(stages))
	for i, st := range stages {
		names[i] = string(st)
	}
	return strings.Join(names, " or ")
}

func previousNote(fingerprint string) string {
	if fingerprint == "" {
		return ""
	}
	return " (previous " + pki.ShortFingerprint(fingerprint) + ")"
}

// inventoryOf returns the status inventory entry of a role.
func inventoryOf(cl *v1alpha1.Cluster, role v1alpha1.CARole) *v1alpha1.CertificateAuthorityInventory {
	if cl.Status.Credentials == nil {
		return nil
	}
	for i := range cl.Status.Credentials.CertificateAuthorities {
		if inv := &cl.Status.Credentials.CertificateAuthorities[i]; inv.Role == role {
			return inv
		}
	}
	return nil
}

// restoredSecret is the Secret to create for an uploaded one: as uploaded,
// controlled by the Cluster as the operator's own Secrets are, without
// blockOwnerDeletion (controlledBy): the rights restore needs are those to
// get and create Secrets.
func restoredSecret(cl *v1alpha1.Cluster, s uploadedSecret) *corev1.Secret {
	typ := s.Type
	if typ == "" {
		typ = corev1.SecretTypeOpaque
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: cl.Namespace, Name: s.Name, Labels: maps.Clone(s.Labels), Annotations: maps.Clone(s.Annotations),
			OwnerReferences: []metav1.OwnerReference{controlledBy(cl)}},
		Type: typ,
		Data: maps.Clone(s.Data),
	}
}

func describeUploaded(s uploadedSecret) string {
	if s.Role == "" {
		return "service-account key"
	}
	cas, err := credentials.DecodeCASecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.Name}, Data: s.Data})
	if err != nil {
		return string(s.Role) + " CA"
	}
	out := fmt.Sprintf("%s CA %s", s.Role, pki.ShortFingerprint(pki.Fingerprint(cas.Current.Cert)))
	if cas.Previous != nil {
		out += fmt.Sprintf(", previous %s", pki.ShortFingerprint(pki.Fingerprint(cas.Previous.Cert)))
	}
	return out
}

func (e *env) restoreCommand() *cobra.Command {
	var (
		id, keyHex string
		roleNames  []string
	)
	cmd := &cobra.Command{
		Use:   "restore CLUSTER",
		Short: "Recreate CLUSTER's missing CA Secrets (and service-account key) from an upload, exactly as uploaded; existing Secrets are kept",
		Long: `Recreate the CA Secrets of CLUSTER that no longer exist from a copy "certs upload" stored, byte for byte, with
their names, labels and annotations, so that Carousel finds the CAs it had instead of generating new ones. A
Secret that exists is never overwritten: the command says which it kept. --role limits it to some CA roles, and
the command fails when one of them was kept because its Secret holds other data.

docs/how-to/recover-a-stuck-rotation.md says when to use it.`,
		Example: `  # The client CA Secret of prod was deleted: recreate it from the upload made before
  kubectl carousel certs restore prod -n team-a --upload-id abc123 --certificate-key <64 hex digits> --role client`,
		Args:              oneCluster,
		ValidArgsFunction: e.completeClusters,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			rolesNamed := cmd.Flags().Changed("role")
			if rolesNamed && len(roleNames) == 0 {
				// --role "$ROLES" with ROLES unset would restore every role.
				return errors.New("--role names no role: name the CA roles to restore, or leave --role out to restore every CA role and the service-account key")
			}
			roles, withServiceAccountKey, err := parseRoles(roleNames)
			if err != nil {
				return err
			}
			key, err := parseCertificateKey(keyHex)
			if err != nil {
				return err
			}
			c, cl, err := e.clusterArg(ctx, args[0])
			if err != nil {
				return err
			}
			upload, err := e.openUpload(ctx, c, cl.Namespace, cl.Name, id, key)
			if err != nil {
				return err
			}
			if upload.secrets == nil {
				return fmt.Errorf("upload %s was made by an earlier kubectl carousel: it holds the key files but not the Secrets' names, labels and annotations, so it cannot be restored. "+
					"`kubectl carousel certs download` still writes its files; recreate the Secret from them by hand (docs/how-to/recover-a-stuck-rotation.md)", id)
			}
			existing, err := existingSecrets(ctx, c, cl.Namespace, upload.secrets)
			if err != nil {
				return err
			}
			steps, err := planRestore(cl, upload.secrets, roles, withServiceAccountKey, existing)
			if err != nil {
				return err
			}
			if withServiceAccountKey && !slices.ContainsFunc(upload.secrets, isServiceAccountKey) {
				fmt.Fprintf(e.streams.ErrOut, "warning: upload %s holds no service-account key (the Cluster had none with its label when it was made)\n", id)
			}
			restored := 0
			for i := range steps {
				step := &steps[i]
				if step.action == restoreCreate {
					s := restoredSecret(cl, step.secret)
					err := c.Create(ctx, s)
					switch {
					case apierrors.IsAlreadyExists(err):
						// Created meanwhile, by the operator or someone else: never overwritten.
						step.action = keepRaced
					case err != nil:
						return fmt.Errorf("restoring secret %s/%s: %w (restored so far: %d)", cl.Namespace, s.Name, err, restored)
					default:
						restored++
					}
				}
				e.reportStep(cl.Namespace, *step)
			}
			fmt.Fprintf(e.streams.Out, "Restored %d of %d Secrets of %s/%s from upload %s.\n", restored, len(steps), cl.Namespace, cl.Name, id)
			e.sweepUploads(ctx, c)
			return restoreOutcome(cl, steps, rolesNamed)
		},
	}
	cmd.Flags().StringVar(&id, "upload-id", "", "The upload ID that \"certs upload\" printed")
	cmd.Flags().StringVar(&keyHex, "certificate-key", "", "The certificate key that \"certs upload\" printed")
	cmd.Flags().StringSliceVar(&roleNames, "role", nil, "Restore only these CA roles (comma-separated); without it, every CA role and the service-account key")
	_ = cmd.MarkFlagRequired("upload-id")
	_ = cmd.MarkFlagRequired("certificate-key")
	return cmd
}

// restoreOutcome is the command's error after the steps ran: Secrets that
// hold the uploaded data but lack what Carousel reads, and, when --role
// named the roles, a role left as it was because its Secret holds other data
// (or was created meanwhile): the user asked for that CA, and a script
// going on after the command would go on without it.
func restoreOutcome(cl *v1alpha1.Cluster, steps []restoreStep, rolesNamed bool) error {
	var metadataLost int
	var kept []string
	for _, step := range steps {
		switch step.action {
		case keepMetadataLost:
			metadataLost++
		case keepDiffers, keepRaced:
			if rolesNamed {
				kept = append(kept, step.secret.Name)
			}
		}
	}
	var errs []error
	if len(kept) > 0 {
		errs = append(errs, fmt.Errorf("Secret(s) of the roles asked for with --role were not restored: %s of %s/%s exist already, with other data or created "+
			"meanwhile, and restore never overwrites a Secret (delete one first to restore it)", strings.Join(kept, ", "), cl.Namespace, cl.Name))
	}
	if metadataLost > 0 {
		errs = append(errs, fmt.Errorf("%d Secret(s) of %s/%s hold the uploaded data without labels or annotations Carousel reads; "+
			"restore never writes an existing Secret: put them back with the commands above", metadataLost, cl.Namespace, cl.Name))
	}
	return errors.Join(errs...)
}

func (e *env) reportStep(ns string, step restoreStep) {
	name, what := ns+"/"+step.secret.Name, describeUploaded(step.secret)
	switch step.action {
	case restoreCreate:
		fmt.Fprintf(e.streams.Out, "restored secret %s (%s)\n", name, what)
	case keepSame:
		fmt.Fprintf(e.streams.Out, "kept secret %s: it exists, with the uploaded data\n", name)
	case keepDiffers:
		fmt.Fprintf(e.streams.Out, "kept secret %s: it exists and its data differs from the upload (%s); not changed\n", name, what)
	case keepRaced:
		fmt.Fprintf(e.streams.Out, "kept secret %s: it was created by someone else while restoring; not changed\n", name)
	case keepMetadataLost:
		fmt.Fprintf(e.streams.Out, "kept secret %s: it exists, with the uploaded data, but lacks labels or annotations the upload holds; not changed. Put them back:\n", name)
		for _, put := range []struct {
			verb  string
			pairs map[string]string
		}{{"label", step.lostLabels}, {"annotate", step.lostAnnotations}} {
			if len(put.pairs) == 0 {
				continue
			}
			args := []string{"kubectl", put.verb, "secret", shellquote.Quote(step.secret.Name), "-n", shellquote.Quote(ns), "--overwrite"}
			for _, k := range slices.Sorted(maps.Keys(put.pairs)) {
				args = append(args, shellquote.Quote(k+"="+put.pairs[k]))
			}
			fmt.Fprintf(e.streams.Out, "  %s\n", strings.Join(args, " "))
		}
	}
}

// isServiceAccountKey: s is the upload's service-account key Secret (it has
// no CA role).
func isServiceAccountKey(s uploadedSecret) bool { return s.Role == "" }

// existingSecrets reads, from the API server and by name, the Secrets an
// upload would restore; a missing one is absent from the map.
func existingSecrets(ctx context.Context, c client.Client, ns string, uploaded []uploadedSecret) (map[string]*corev1.Secret, error) {
	out := map[string]*corev1.Secret{}
	for _, u := range uploaded {
		s := &corev1.Secret{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: u.Name}, s)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading secret %s/%s: %w", ns, u.Name, err)
		default:
			out[u.Name] = s
		}
	}
	return out, nil
}
