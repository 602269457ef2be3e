package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/scheme"
	"github.com/carousel-dev/carousel/pkg/sealing"
)

func TestSealedCertificatesOpenOnlyWithTheirKeyAndCluster(t *testing.T) {
	key, _ := sealing.NewKey()
	secrets := []uploadedSecret{
		{Role: v1alpha1.CARoleCluster, Name: "prod-ca-cluster", Type: corev1.SecretTypeOpaque,
			Labels:      map[string]string{v1alpha1.LabelCluster: "prod", v1alpha1.LabelCA: "cluster"},
			Annotations: map[string]string{v1alpha1.AnnotationRotation: "2026-01-02T03:04:05Z"},
			Data:        map[string][]byte{"tls.key": []byte("secret")}},
		{Name: "prod-service-account-key", Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"sa.key": []byte("also secret")}},
	}
	sealed, err := sealCertificates(secrets, key, "team-a/prod")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("secret")) || bytes.Contains(sealed, []byte("prod-ca-cluster")) {
		t.Fatal("the sealed copy contains the plaintext")
	}
	got, err := openCertificates(sealed, key, "team-a/prod")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.secrets, secrets) {
		t.Errorf("opened Secrets = %+v, want %+v", got.secrets, secrets)
	}
	if files, ignored := got.files(); len(ignored) != 0 || len(files) != 2 || string(files["cluster-ca-tls.key"]) != "secret" || string(files["sa.key"]) != "also secret" {
		t.Errorf("files = %q", files)
	}
	other, _ := sealing.NewKey()
	for name, open := range map[string]func() error{
		"wrong key":     func() error { _, err := openCertificates(sealed, other, "team-a/prod"); return err },
		"other cluster": func() error { _, err := openCertificates(sealed, key, "team-b/prod"); return err },
		"tampered": func() error {
			bad := bytes.Clone(sealed)
			bad[len(bad)-1] ^= 1
			_, err := openCertificates(bad, key, "team-a/prod")
			return err
		},
	} {
		if err := open(); err == nil || !strings.Contains(err.Error(), "does not open this upload") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	if _, err := openCertificates(sealed, key[:16], "team-a/prod"); err == nil || !strings.Contains(err.Error(), "must be 32 bytes") {
		t.Errorf("short key: err = %v", err)
	}
}

func TestLegacyUploadsOpenAsFilesWithoutSecrets(t *testing.T) {
	key, _ := sealing.NewKey()
	// What kubectl carousel sealed before uploads recorded whole Secrets. A
	// file may even be called "format" (from a data key someone added).
	legacy := map[string][]byte{"cluster-ca-tls.key": []byte("k"), "sa.key": []byte("s"), "format": []byte("2")}
	plain, _ := json.Marshal(legacy)
	sealed, err := sealing.Seal(plain, key, "team-a/prod")
	if err != nil {
		t.Fatal(err)
	}
	got, err := openCertificates(sealed, key, "team-a/prod")
	if err != nil {
		t.Fatal(err)
	}
	if got.secrets != nil {
		t.Errorf("a legacy upload has Secrets: %+v", got.secrets)
	}
	files, ignored := got.files()
	if want := map[string][]byte{"cluster-ca-tls.key": []byte("k"), "sa.key": []byte("s")}; !reflect.DeepEqual(files, want) || !reflect.DeepEqual(ignored, []string{"format"}) {
		t.Errorf("files = %q, ignored %q; want %q, ignored format", files, ignored, want)
	}

	if _, err := decodePayload([]byte(`{"format":3,"secrets":[]}`)); err == nil || !strings.Contains(err.Error(), "format 3") {
		t.Errorf("unknown format: err = %v", err)
	}
	if got, err := decodePayload([]byte(`{"format":2}`)); err != nil || got.secrets == nil {
		t.Errorf("an upload without Secrets is still not a legacy one: %+v, %v", got, err)
	}
}

func uploadToken(id string, expires string) corev1.Secret {
	return corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, UID: types.UID("uid-" + id)},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		Data:       map[string][]byte{bootstrapapi.BootstrapTokenIDKey: []byte(id), bootstrapapi.BootstrapTokenExpirationKey: []byte(expires)},
	}
}

func uploadCopy(id string, owner *corev1.Secret) corev1.Secret {
	s := corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: certsSecretPrefix + id}, Data: map[string][]byte{certsDataKey: []byte("sealed")}}
	if owner != nil {
		s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: owner.Name, UID: owner.UID}}
	}
	return s
}

func TestExpiredUploadsDeletesOnlyWhatNoLiveTokenOwns(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	live, expired, unreadable := uploadToken("live01", now.Add(time.Second).Format(time.RFC3339)),
		uploadToken("exp001", now.Format(time.RFC3339)), uploadToken("bad001", "tomorrow")
	recreated := uploadToken("rec001", now.Add(time.Hour).Format(time.RFC3339))
	staleOwner := recreated.DeepCopy()
	staleOwner.UID = "an-earlier-token"
	items := []corev1.Secret{
		live, uploadCopy("live01", &live),
		expired, uploadCopy("exp001", &expired),
		unreadable, // its copy is already gone
		uploadCopy("orphan", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-orphan", UID: "gone"}}),
		uploadCopy("norefs", nil),  // no owner reference: its token by name, absent
		uploadCopy("live01x", nil), // no owner reference and no token of that name
		recreated, uploadCopy("rec001", staleOwner),
		{ObjectMeta: metav1.ObjectMeta{Name: "something-else"}}, // labelled, but not an upload Secret
	}
	want := []string{
		"bootstrap-token-bad001", "bootstrap-token-exp001",
		"carousel-certs-bad001", "carousel-certs-exp001", "carousel-certs-live01x", "carousel-certs-norefs",
		"carousel-certs-orphan", "carousel-certs-rec001",
	}
	if got := expiredUploads(items, now); !reflect.DeepEqual(got, want) {
		t.Errorf("expiredUploads = %q, want %q", got, want)
	}
	// A copy without an owner reference belongs to the token of its ID.
	if got := expiredUploads([]corev1.Secret{live, uploadCopy("live01", nil)}, now); len(got) != 0 {
		t.Errorf("a live upload was deleted: %q", got)
	}
}

func TestParseRoles(t *testing.T) {
	roles, withSA, err := parseRoles(nil)
	if err != nil || !reflect.DeepEqual(roles, v1alpha1.CARoles()) || !withSA {
		t.Errorf("no --role: %v, %v, %v", roles, withSA, err)
	}
	roles, withSA, err = parseRoles([]string{"etcd", " cluster", "etcd"})
	if err != nil || !reflect.DeepEqual(roles, []v1alpha1.CARole{v1alpha1.CARoleCluster, v1alpha1.CARoleEtcd}) || withSA {
		t.Errorf("--role etcd,cluster,etcd: %v, %v, %v", roles, withSA, err)
	}
	if _, _, err := parseRoles([]string{"etcd", "sa"}); err == nil || !strings.Contains(err.Error(), `unknown role "sa" in --role: the CA roles are cluster, client, kubelet`) {
		t.Errorf("unknown role: err = %v", err)
	}
}

// An upload names a CA Secret it cannot find, and that it may have lost its
// label rather than be gone (a CA that lost its label is not lost).
func TestUploadNamesACASecretItCannotFind(t *testing.T) {
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	secrets := map[string]*corev1.Secret{}
	for _, role := range v1alpha1.CARoles() {
		if role != v1alpha1.CARoleEtcd {
			name := credentials.CASecretName("prod", role)
			secrets[name] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}
		}
	}
	_, _, err := uploadSecrets(secrets, cl)
	if want := "the etcd CA Secret prod-ca-etcd is missing, or lacks the label carousel.dev/cluster=prod"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("uploadSecrets = %v, want %q", err, want)
	}

	// Without the service-account key Secret, the CAs are uploaded, with a
	// warning that names it.
	name := credentials.CASecretName("prod", v1alpha1.CARoleEtcd)
	secrets[name] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}
	uploaded, warning, err := uploadSecrets(secrets, cl)
	if err != nil || len(uploaded) != len(v1alpha1.CARoles()) || !strings.Contains(warning, "the service-account key Secret prod-service-account-key is missing") {
		t.Errorf("uploadSecrets without the key = %d Secrets, %q, %v; want the CAs and a warning", len(uploaded), warning, err)
	}
	key := credentials.ServiceAccountKeySecretName("prod")
	secrets[key] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key}}
	if uploaded, warning, err := uploadSecrets(secrets, cl); err != nil || warning != "" || len(uploaded) != len(v1alpha1.CARoles())+1 {
		t.Errorf("uploadSecrets with the key = %d Secrets, %q, %v; want all, and no warning", len(uploaded), warning, err)
	}
}

// failingWriter fails every write, as stdout on a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) {
	return 0, errors.New("write /dev/stdout: no space left on device")
}

// The certificate key is shown once and stored nowhere: a write of it that
// fails is an error (certs upload then deletes the copy nobody can open).
func TestPrintUploadReportsAFailedWriteOfTheKey(t *testing.T) {
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	key := bytes.Repeat([]byte{7}, 32)
	if err := printUpload(failingWriter{}, cl, "abcdef", key, 8, 16, time.Now()); err == nil {
		t.Fatal("a key that could not be written was reported shown")
	}
	var out bytes.Buffer
	if err := printUpload(&out, cl, "abcdef", key, 8, 16, time.Now()); err != nil || !strings.Contains(out.String(), "\n"+sealing.EncodeKey(key)+"\n") {
		t.Errorf("printUpload = %v, printed %q; want the key on a line of its own", err, out.String())
	}
}

// A Ctrl-C while the encrypted copy is being stored (the write may have
// reached the API server) still deletes the bootstrap token, and with it the
// copy nobody has the key of: the deletion does not run on the command's
// context, which ended.
func TestStoreUploadDeletesTheTokenAfterACtrlC(t *testing.T) {
	ctx, ctrlC := context.WithCancel(context.Background())
	defer ctrlC()
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := c.Create(ctx, obj, opts...); err != nil || obj.GetName() != certsSecretPrefix+"abc123" {
				return err
			}
			ctrlC() // stored, but the answer is lost to the Ctrl-C
			return ctx.Err()
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := ctx.Err(); err != nil {
				return err // as a real client does on an ended context
			}
			return c.Delete(ctx, obj, opts...)
		},
	}).Build()
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-abc123"}}
	copySecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: certsSecretPrefix + "abc123"}}

	err := storeUpload(ctx, c, token, copySecret)
	if err == nil || !strings.Contains(err.Error(), "its bootstrap token bootstrap-token-abc123 is deleted") {
		t.Fatalf("err = %v, want the copy's failure and the token deleted", err)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(token), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the token is left (get: %v): it owns a copy whose key was never shown", err)
	}
	if got := copySecret.OwnerReferences; len(got) != 1 || got[0].Name != token.Name || got[0].Kind != "Secret" {
		t.Errorf("the copy's owners = %+v, want the token", got)
	}
}
