package plugin

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/pki/pkitest"
)

// uploadedCA is the uploaded CA Secret of a role of Cluster "prod".
func uploadedCA(t *testing.T, role v1alpha1.CARole, current, previous *pki.KeyPair, rotation string) uploadedSecret {
	t.Helper()
	data, err := credentials.EncodeCASecretData(&credentials.CAs{Current: current, Previous: previous})
	if err != nil {
		t.Fatal(err)
	}
	s := uploadedSecret{Role: role, Name: credentials.CASecretName("prod", role), Type: corev1.SecretTypeOpaque,
		Labels: credentials.CALabels("prod", role), Data: data}
	if rotation != "" {
		s.Annotations = map[string]string{v1alpha1.AnnotationRotation: rotation}
	}
	return s
}

func info(kp *pki.KeyPair) *v1alpha1.CertificateInfo {
	if kp == nil {
		return nil
	}
	return credentials.CertificateInfo(kp)
}

// clusterRecording is Cluster "prod" whose status records, for one role,
// current and previous, in phase (empty: never rotated) started at started.
func clusterRecording(role v1alpha1.CARole, current, previous *pki.KeyPair, phase v1alpha1.CARotationPhase, started time.Time) *v1alpha1.Cluster {
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	cl.Status.Credentials = &v1alpha1.ClusterCredentials{CertificateAuthorities: []v1alpha1.CertificateAuthorityInventory{
		{Role: role, Current: info(current), Previous: info(previous)},
	}}
	if phase != "" {
		at := metav1.NewTime(started)
		cl.Status.Credentials.Rotation = &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{Phase: phase, LastInitiationTime: &at}}
	}
	return cl
}

func TestCheckUploadedCARefusesACopyOlderThanTheStatus(t *testing.T) {
	etcd := v1alpha1.CARoleEtcd
	started := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	id := started.Format(time.RFC3339)
	oldCA, newCA := pkitest.NewCA(t, "old"), pkitest.NewCA(t, "new")
	for _, tc := range []struct {
		name     string
		cluster  *v1alpha1.Cluster
		upload   uploadedSecret
		refusing string // empty: restorable
	}{
		{name: "the CA the status records", cluster: clusterRecording(etcd, oldCA, nil, "", started),
			upload: uploadedCA(t, etcd, oldCA, nil, "")},
		{name: "both CAs of a rotation, as recorded", cluster: clusterRecording(etcd, newCA, oldCA, v1alpha1.RotationPrepared, started),
			upload: uploadedCA(t, etcd, newCA, oldCA, id)},
		{name: "this rotation's new CA, not yet in the status", cluster: clusterRecording(etcd, oldCA, nil, v1alpha1.RotationPreparing, started),
			upload: uploadedCA(t, etcd, newCA, oldCA, id)},
		{name: "the old CA dropped, not yet in the status", cluster: clusterRecording(etcd, newCA, oldCA, v1alpha1.RotationFinalizing, started),
			upload: uploadedCA(t, etcd, newCA, nil, id)},
		{name: "nothing recorded for the role", cluster: clusterRecording(v1alpha1.CARoleClient, oldCA, nil, "", started),
			upload: uploadedCA(t, etcd, newCA, nil, "")},
		{name: "a copy from before the rotation", cluster: clusterRecording(etcd, newCA, oldCA, v1alpha1.RotationPrepared, started),
			upload: uploadedCA(t, etcd, oldCA, nil, ""), refusing: "the upload holds CA " + pki.ShortFingerprint(pki.Fingerprint(oldCA.Cert)) + ", but the Cluster's status records CA " + pki.ShortFingerprint(pki.Fingerprint(newCA.Cert)) + " (previous "},
		{name: "a copy from the middle of a completed rotation", cluster: clusterRecording(etcd, newCA, nil, v1alpha1.RotationCompleted, started),
			upload: uploadedCA(t, etcd, newCA, oldCA, id), refusing: "would bring back a CA the Cluster no longer uses"},
		{name: "another rotation's new CA", cluster: clusterRecording(etcd, oldCA, nil, v1alpha1.RotationPreparing, started),
			upload: uploadedCA(t, etcd, newCA, oldCA, "2025-01-01T00:00:00Z"), refusing: "refusing to restore the etcd CA"},
		{name: "an aborted rotation's new CA, deleted by the abort", cluster: clusterRecording(etcd, oldCA, nil, v1alpha1.RotationAborting, started),
			upload: uploadedCA(t, etcd, newCA, oldCA, id), refusing: "would bring back a CA the Cluster no longer uses"},
		{name: "aborting: a copy from before the rotation", cluster: clusterRecording(etcd, oldCA, newCA, v1alpha1.RotationAborting, started),
			upload: uploadedCA(t, etcd, oldCA, nil, ""), refusing: "refusing to restore the etcd CA"},
		{name: "aborting: this rotation's CAs, before the abort swapped them", cluster: clusterRecording(etcd, oldCA, newCA, v1alpha1.RotationAborting, started),
			upload: uploadedCA(t, etcd, newCA, oldCA, id)},
		{name: "aborting: the aborted new CA deleted, not yet in the status", cluster: clusterRecording(etcd, oldCA, newCA, v1alpha1.RotationAborting, started),
			upload: uploadedCA(t, etcd, oldCA, nil, id)},
		{name: "a CA replaced by reissue-ca", cluster: clusterRecording(etcd, newCA, nil, "", started),
			upload: uploadedCA(t, etcd, oldCA, nil, ""), refusing: "reissue-ca"},
	} {
		err := checkUploadedCA(tc.cluster, etcd, tc.upload)
		switch {
		case tc.refusing == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refusing != "" && (err == nil || !strings.Contains(err.Error(), tc.refusing)):
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.refusing)
		}
	}
}

func TestPlanRestoreCreatesOnlyWhatIsMissing(t *testing.T) {
	cluster, etcd := v1alpha1.CARoleCluster, v1alpha1.CARoleEtcd
	clusterCA, etcdCA := pkitest.NewCA(t, "cluster"), pkitest.NewCA(t, "etcd")
	cl := clusterRecording(cluster, clusterCA, nil, "", time.Time{})
	cl.Status.Credentials.CertificateAuthorities = append(cl.Status.Credentials.CertificateAuthorities,
		v1alpha1.CertificateAuthorityInventory{Role: etcd, Current: info(etcdCA)})
	sa := uploadedSecret{Name: "prod-service-account-key", Type: corev1.SecretTypeOpaque, Labels: credentials.ClusterLabels("prod"),
		Data: map[string][]byte{credentials.DataKeyServiceAccountKey: []byte("sa")}}
	uploaded := []uploadedSecret{uploadedCA(t, cluster, clusterCA, nil, ""), uploadedCA(t, etcd, etcdCA, nil, ""), sa}
	roles := []v1alpha1.CARole{cluster, etcd}

	actions := func(steps []restoreStep) map[string]restoreAction {
		out := map[string]restoreAction{}
		for _, s := range steps {
			out[s.secret.Name] = s.action
		}
		return out
	}
	// The cluster CA is there as uploaded, the etcd CA is lost, the
	// service-account key was replaced.
	existing := map[string]*corev1.Secret{
		"prod-ca-cluster":          {ObjectMeta: metav1.ObjectMeta{Labels: uploaded[0].Labels}, Data: uploaded[0].Data},
		"prod-service-account-key": {Data: map[string][]byte{credentials.DataKeyServiceAccountKey: []byte("another")}},
	}
	steps, err := planRestore(cl, uploaded, roles, true, existing)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]restoreAction{"prod-ca-cluster": keepSame, "prod-ca-etcd": restoreCreate, "prod-service-account-key": keepDiffers}
	if got := actions(steps); len(got) != len(want) || got["prod-ca-cluster"] != keepSame || got["prod-ca-etcd"] != restoreCreate || got["prod-service-account-key"] != keepDiffers {
		t.Errorf("actions = %v, want %v", got, want)
	}

	// --role etcd: the service-account key is left out.
	steps, err = planRestore(cl, uploaded, []v1alpha1.CARole{etcd}, false, nil)
	if err != nil || len(steps) != 1 || steps[0].secret.Name != "prod-ca-etcd" || steps[0].action != restoreCreate {
		t.Errorf("--role etcd: %+v, %v", steps, err)
	}

	// An existing Secret is kept even when the upload's copy of it is stale.
	stale := uploadedCA(t, cluster, pkitest.NewCA(t, "stale"), nil, "")
	if steps, err := planRestore(cl, []uploadedSecret{stale}, []v1alpha1.CARole{cluster}, false, existing); err != nil || steps[0].action != keepDiffers {
		t.Errorf("stale but existing: %+v, %v", steps, err)
	}
	if _, err := planRestore(cl, []uploadedSecret{stale}, []v1alpha1.CARole{cluster}, false, nil); err == nil || !strings.Contains(err.Error(), "refusing to restore the cluster CA") {
		t.Errorf("stale and missing: err = %v", err)
	}

	if _, err := planRestore(cl, uploaded[:1], roles, false, nil); err == nil || !strings.Contains(err.Error(), "the upload holds no etcd CA") {
		t.Errorf("a role missing from the upload: err = %v", err)
	}
	renamed := uploadedCA(t, etcd, etcdCA, nil, "")
	renamed.Name = "other-ca-etcd"
	if _, err := planRestore(cl, []uploadedSecret{renamed}, []v1alpha1.CARole{etcd}, false, nil); err == nil || !strings.Contains(err.Error(), `names Secret "other-ca-etcd" where "prod-ca-etcd" was expected`) {
		t.Errorf("another Cluster's Secret: err = %v", err)
	}
	// An upload made while there was no service-account key restores none.
	if steps, err := planRestore(cl, uploaded[:2], roles, true, nil); err != nil || len(steps) != 2 {
		t.Errorf("no service-account key uploaded: %+v, %v", steps, err)
	}
}

func TestRestoredSecretIsTheUploadedOne(t *testing.T) {
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	up := uploadedCA(t, v1alpha1.CARoleEtcd, pkitest.NewCA(t, "etcd"), nil, "2026-03-01T12:00:00Z")
	s := restoredSecret(cl, up)
	if s.Namespace != "team-a" || s.Name != "prod-ca-etcd" || s.Type != corev1.SecretTypeOpaque ||
		s.Labels[v1alpha1.LabelCA] != "etcd" || s.Annotations[v1alpha1.AnnotationRotation] != "2026-03-01T12:00:00Z" ||
		string(s.Data[v1alpha1.DataKeyCertificate]) != string(up.Data[v1alpha1.DataKeyCertificate]) {
		t.Errorf("restored Secret = %+v", s)
	}
	s.Labels["changed"] = "yes"
	if _, ok := up.Labels["changed"]; ok {
		t.Error("the restored Secret shares its labels with the upload")
	}
	up.Type = ""
	if got := restoredSecret(cl, up).Type; got != corev1.SecretTypeOpaque {
		t.Errorf("a Secret uploaded without a type is restored as %q", got)
	}
}

// A service-account key copied before the key rotation the status records
// last would bring back the old key alone, while the rotation's new key may
// sign tokens already: it is refused. A copy made in that rotation (the
// Secret carries its annotation from the staging of the new key on) is not.
func TestPlanRestoreRefusesAServiceAccountKeyOlderThanTheStatus(t *testing.T) {
	started := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	id := started.Format(time.RFC3339)
	keyRotation := func(phase v1alpha1.ServiceAccountKeyRotationPhase) *v1alpha1.Cluster {
		cl := clusterRecording(v1alpha1.CARoleCluster, nil, nil, "", started)
		cl.Status.Credentials.Rotation = &v1alpha1.CredentialsRotation{ServiceAccountKey: &v1alpha1.ServiceAccountKeyRotation{
			Phase: phase, LastInitiationTime: &metav1.Time{Time: started}}}
		return cl
	}
	newKeySigning := func(cl *v1alpha1.Cluster) *v1alpha1.Cluster {
		cl.Status.Credentials.Rotation.ServiceAccountKey.NewKeySigningTime = &metav1.Time{Time: started.Add(time.Hour)}
		return cl
	}
	// The key Secret through a rotation: the old key, the new one staged
	// next to it, the new one signing, the new one alone.
	old, err := credentials.NewServiceAccountKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	next, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	staged := old.Staged(next)
	keys := map[credentials.ServiceAccountKeyStage]*credentials.ServiceAccountKey{
		credentials.ServiceAccountKeyStaged:   staged,
		credentials.ServiceAccountKeySwitched: staged.Switched(),
	}
	keys[credentials.ServiceAccountKeySingle] = keys[credentials.ServiceAccountKeySwitched].PreviousDropped()
	uploadOf := func(key *credentials.ServiceAccountKey, rotation string) uploadedSecret {
		data, err := key.Data()
		if err != nil {
			t.Fatal(err)
		}
		s := uploadedSecret{Name: "prod-service-account-key", Type: corev1.SecretTypeOpaque, Labels: credentials.ClusterLabels("prod"), Data: data}
		if rotation != "" {
			s.Annotations = map[string]string{v1alpha1.AnnotationRotation: rotation}
		}
		return s
	}
	upload := func(rotation string) uploadedSecret {
		if rotation == id {
			return uploadOf(keys[credentials.ServiceAccountKeySwitched], id)
		}
		return uploadOf(old, rotation)
	}
	copied := func(stage credentials.ServiceAccountKeyStage) uploadedSecret { return uploadOf(keys[stage], id) }
	for _, tc := range []struct {
		name     string
		cluster  *v1alpha1.Cluster
		upload   uploadedSecret
		refusing string // empty: restorable
	}{
		{"never rotated", clusterRecording(v1alpha1.CARoleCluster, nil, nil, "", started), upload(""), ""},
		{"copied once the rotation completed", keyRotation(v1alpha1.ServiceAccountKeyCompleted), copied(credentials.ServiceAccountKeySingle), ""},
		{"copied in the rotation, which is preparing", keyRotation(v1alpha1.ServiceAccountKeyPreparing), upload(id), ""},
		{"copied Staged, restored while preparing", keyRotation(v1alpha1.ServiceAccountKeyPreparing), copied(credentials.ServiceAccountKeyStaged), ""},
		{"copied Switched, restored once prepared", keyRotation(v1alpha1.ServiceAccountKeyPrepared), copied(credentials.ServiceAccountKeySwitched), ""},
		{"copied Switched, restored while finalizing", keyRotation(v1alpha1.ServiceAccountKeyFinalizing), copied(credentials.ServiceAccountKeySwitched), ""},
		{"copied Single, restored while finalizing", keyRotation(v1alpha1.ServiceAccountKeyFinalizing), copied(credentials.ServiceAccountKeySingle), ""},
		// A copy made during the rotation carries its annotation whatever
		// its stage: the old key must not sign or verify again.
		{"copied Staged, restored once completed", keyRotation(v1alpha1.ServiceAccountKeyCompleted), copied(credentials.ServiceAccountKeyStaged),
			"holds the key Secret Staged, but in phase Completed it can only be Single"},
		{"copied Switched, restored once completed", keyRotation(v1alpha1.ServiceAccountKeyCompleted), copied(credentials.ServiceAccountKeySwitched),
			"holds the key Secret Switched, but in phase Completed it can only be Single"},
		{"copied Staged, restored once prepared", keyRotation(v1alpha1.ServiceAccountKeyPrepared), copied(credentials.ServiceAccountKeyStaged),
			"in phase Prepared it can only be Switched"},
		{"copied Staged, restored once the new key signed everywhere", newKeySigning(keyRotation(v1alpha1.ServiceAccountKeyPreparing)),
			copied(credentials.ServiceAccountKeyStaged), "in phase Preparing it can only be Switched"},
		{"copied Staged, restored while finalizing", keyRotation(v1alpha1.ServiceAccountKeyFinalizing), copied(credentials.ServiceAccountKeyStaged),
			"in phase Finalizing it can only be Switched or Single"},
		{"copied before any rotation, restored once it completed", keyRotation(v1alpha1.ServiceAccountKeyCompleted), upload(""),
			"the copy was made before any service-account key rotation the Cluster's status records (started " + id + ", Completed)"},
		{"copied before the rotation, restored while it prepares", keyRotation(v1alpha1.ServiceAccountKeyPreparing), upload(""), "refusing to restore the service-account key"},
		{"copied in an earlier rotation", keyRotation(v1alpha1.ServiceAccountKeyPrepared), upload("2025-01-01T00:00:00Z"),
			"made in the one of 2025-01-01T00:00:00Z, before the service-account key rotation"},
	} {
		_, err := planRestore(tc.cluster, []uploadedSecret{tc.upload}, nil, true, nil)
		switch {
		case tc.refusing == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refusing != "" && (err == nil || !strings.Contains(err.Error(), tc.refusing)):
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.refusing)
		}
		// A key Secret that exists is kept whatever the copy: nothing to refuse.
		existing := map[string]*corev1.Secret{"prod-service-account-key": {Data: map[string][]byte{credentials.DataKeyServiceAccountKey: []byte("live")}}}
		if steps, err := planRestore(tc.cluster, []uploadedSecret{tc.upload}, nil, true, existing); err != nil || len(steps) != 1 || steps[0].action != keepDiffers {
			t.Errorf("%s, the key Secret there: %+v, %v; want it kept", tc.name, steps, err)
		}
	}
}

// A Secret there with the uploaded data that lost labels or annotations the
// upload holds (the how-to sends users to certs restore for a CA Secret
// that lost its labels) is kept, never written, and the command prints how
// to put back exactly those, quoted for the shell, and fails.
func TestRestoreSaysHowToPutBackLostLabelsAndAnnotations(t *testing.T) {
	cluster := v1alpha1.CARoleCluster
	clusterCA := pkitest.NewCA(t, "cluster")
	cl := clusterRecording(cluster, clusterCA, nil, "", time.Time{})
	up := uploadedCA(t, cluster, clusterCA, nil, "")
	up.Annotations = map[string]string{v1alpha1.AnnotationRotation: "it's"}
	labels := maps.Clone(up.Labels)
	delete(labels, v1alpha1.LabelCluster)
	existing := map[string]*corev1.Secret{up.Name: {ObjectMeta: metav1.ObjectMeta{Labels: labels}, Data: up.Data}}
	steps, err := planRestore(cl, []uploadedSecret{up}, []v1alpha1.CARole{cluster}, false, existing)
	if err != nil || len(steps) != 1 || steps[0].action != keepMetadataLost {
		t.Fatalf("planRestore = %+v, %v; want the Secret kept, its metadata lost", steps, err)
	}
	// An annotation there with another value (an abort since put the old CA
	// back under its own rotation's) is not lost.
	existing[up.Name].Labels, existing[up.Name].Annotations = up.Labels, map[string]string{v1alpha1.AnnotationRotation: "later"}
	if steps, err := planRestore(cl, []uploadedSecret{up}, []v1alpha1.CARole{cluster}, false, existing); err != nil || steps[0].action != keepSame {
		t.Errorf("an annotation changed since the upload: %+v, %v; want the Secret kept as it is", steps, err)
	}
	var out bytes.Buffer
	(&env{streams: genericiooptions.IOStreams{Out: &out}}).reportStep("team-a", steps[0])
	for _, want := range []string{
		"kubectl label secret prod-ca-cluster -n team-a --overwrite " + v1alpha1.LabelCluster + "=prod\n",
		"kubectl annotate secret prod-ca-cluster -n team-a --overwrite '" + v1alpha1.AnnotationRotation + "=it'\\''s'\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report:\n%s\nwant a line %q", out.String(), want)
		}
	}
}

// A run with --role fails when a role asked for was left as it was (its
// Secret holds other data, or was created meanwhile): a script going on
// after it would go on without that CA. Without --role, keeping newer
// Secrets is what a restore of everything does, and it succeeds.
func TestRestoreFailsWhenARoleAskedForIsNotRestored(t *testing.T) {
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	step := func(name string, action restoreAction) restoreStep {
		return restoreStep{secret: uploadedSecret{Name: name}, action: action}
	}
	for name, tc := range map[string]struct {
		steps      []restoreStep
		rolesNamed bool
		want       []string
	}{
		"restored":                         {[]restoreStep{step("prod-ca-client", restoreCreate)}, true, nil},
		"there already, the uploaded data": {[]restoreStep{step("prod-ca-client", keepSame)}, true, nil},
		"other data, asked for":            {[]restoreStep{step("prod-ca-client", keepDiffers), step("prod-ca-etcd", restoreCreate)}, true, []string{"not restored: prod-ca-client of team-a/prod"}},
		"created meanwhile, asked for":     {[]restoreStep{step("prod-ca-client", keepRaced)}, true, []string{"not restored: prod-ca-client of team-a/prod"}},
		"other data, everything restored":  {[]restoreStep{step("prod-ca-client", keepDiffers), step("prod-ca-etcd", keepRaced)}, false, nil},
		"metadata lost":                    {[]restoreStep{step("prod-ca-client", keepMetadataLost)}, false, []string{"1 Secret(s) of team-a/prod hold the uploaded data without labels"}},
		"both": {[]restoreStep{step("prod-ca-client", keepMetadataLost), step("prod-ca-etcd", keepDiffers)}, true,
			[]string{"not restored: prod-ca-etcd of", "1 Secret(s) of team-a/prod hold"}},
	} {
		err := restoreOutcome(cl, tc.steps, tc.rolesNamed)
		if (err != nil) != (len(tc.want) > 0) {
			t.Errorf("%s: restoreOutcome = %v, want an error: %t", name, err, len(tc.want) > 0)
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: restoreOutcome = %v, want it to say %q", name, err, want)
			}
		}
	}
}

// --role "$ROLES" with ROLES unset names no role: it is refused, not read
// as "every role and the service-account key", before anything is read.
func TestAnEmptyRoleListIsRefused(t *testing.T) {
	err := run("certs", "restore", "prod", "-n", "team-a", "--upload-id", "abc123", "--certificate-key", strings.Repeat("0", 64),
		"--role", "", "--server", "https://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "--role names no role") {
		t.Errorf("--role \"\": %v, want it refused", err)
	}
}
