package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"maps"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// asCached is obj as the manager's cache holds it: changed by the
// transform CacheOptions sets for its type.
func asCached[T client.Object](t *testing.T, obj T) T {
	t.Helper()
	for kind, by := range CacheOptions().ByObject {
		if reflect.TypeOf(kind) == reflect.TypeOf(obj) && by.Transform != nil {
			got, err := by.Transform(obj)
			if err != nil {
				t.Fatal(err)
			}
			return got.(T)
		}
	}
	t.Fatalf("CacheOptions sets no transform of %T", obj)
	return obj
}

func TestCacheConfigMapKeepsNoRecordData(t *testing.T) {
	configMap := func(name, cluster string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "7", Labels: map[string]string{v1alpha1.LabelCluster: cluster},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "carousel-controller-manager"}}},
			Data:       map[string]string{"record.json": "{}"},
			BinaryData: map[string][]byte{"record.json.gz": []byte("gzip")},
		}
	}
	for _, name := range []string{credentials.CertificateUsageConfigMapName("prod"), credentials.IssuedKubeconfigsConfigMapName("prod")} {
		cached := asCached(t, configMap(name, "prod"))
		if cached.Data != nil || cached.BinaryData != nil || cached.ManagedFields != nil {
			t.Errorf("the record %s is cached with data %q, binary data %q and managedFields %v, want none", name, cached.Data, cached.BinaryData, cached.ManagedFields)
		}
		if cached.ResourceVersion != "7" || cached.Labels[v1alpha1.LabelCluster] != "prod" {
			t.Errorf("the record %s is cached without its metadata: %+v", name, cached.ObjectMeta)
		}
		if again := asCached(t, cached.DeepCopy()); !equality.Semantic.DeepEqual(again, cached) {
			t.Errorf("transformed twice, the record %s is cached as %+v, want %+v", name, again, cached)
		}
	}
	for _, other := range []*corev1.ConfigMap{
		configMap(credentials.BundleConfigMapName("prod", v1alpha1.CARoleCluster), "prod"),
		configMap(credentials.CertificateUsageConfigMapName("prod"), "staging"), // not prod's record
	} {
		if got := asCached(t, other); len(got.Data) != 1 || len(got.BinaryData) != 1 || got.ManagedFields != nil {
			t.Errorf("%s labelled %v is cached with data %q, binary data %q and managedFields %v, want its data and no managedFields",
				other.Name, other.Labels, got.Data, got.BinaryData, got.ManagedFields)
		}
	}
}

func TestCacheSecretKeepsDerivedValuesAsDigests(t *testing.T) {
	leafData := func() map[string][]byte {
		return map[string][]byte{"tls.crt": []byte("certificate"), "tls.key": []byte("key"), "ca.crt": []byte("bundle"), "kubeconfig": []byte("kubeconfig")}
	}
	leaf := func() *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "prod-admin", Labels: map[string]string{v1alpha1.LabelCluster: "prod", v1alpha1.LabelCertificate: "admin"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "carousel-controller-manager"}}},
			Data: leafData(),
		}
	}

	cached := asCached(t, leaf())
	if cached.ManagedFields != nil {
		t.Errorf("cached managedFields = %v, want none", cached.ManagedFields)
	}
	if string(cached.Data["tls.crt"]) != "certificate" || string(cached.Data["tls.key"]) != "key" {
		t.Errorf("the certificate and key changed: %q, %q", cached.Data["tls.crt"], cached.Data["tls.key"])
	}
	for _, k := range []string{"ca.crt", "kubeconfig"} {
		if _, ok := cached.Data[k]; ok || len(cached.Data["sha256:"+k]) != sha256.Size {
			t.Errorf("cached data = %q, want %s as its digest only", cached.Data, k)
		}
	}
	if !sameData(cached.Data, leafData()) {
		t.Error("the cached data is not the same as the Secret's")
	}
	if again := asCached(t, cached.DeepCopy()); !equality.Semantic.DeepEqual(again, cached) {
		t.Errorf("transformed twice, the Secret is cached as %q, want %q", again.Data, cached.Data)
	}

	for name, want := range map[string]func(map[string][]byte){
		"another kubeconfig": func(d map[string][]byte) { d["kubeconfig"] = []byte("another") },
		"no kubeconfig":      func(d map[string][]byte) { delete(d, "kubeconfig") },
		"a key more":         func(d map[string][]byte) { d["extra"] = nil },
		"another key":        func(d map[string][]byte) { d["tls.key"] = []byte("another") },
	} {
		data := leafData()
		want(data)
		if sameData(cached.Data, data) {
			t.Errorf("the cached data is the same as with %s", name)
		}
	}

	// Whoever writes the Secret cannot make the cache hold a digest of their
	// choosing: what they write is digested.
	forged := leaf()
	sum := sha256.Sum256([]byte("kubeconfig"))
	forged.Data["kubeconfig"] = sum[:]
	if sameData(asCached(t, forged).Data, leafData()) {
		t.Error("a written digest passes for the value it digests")
	}

	for _, other := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "prod-ca-cluster", Labels: map[string]string{v1alpha1.LabelCluster: "prod"}}, Data: leafData()},
		{ObjectMeta: metav1.ObjectMeta{Name: "prod-ca-cluster", Labels: map[string]string{v1alpha1.LabelCluster: "prod", v1alpha1.LabelCertificate: "admin"}}, Data: leafData()},
	} {
		if got := asCached(t, other); !maps.EqualFunc(got.Data, leafData(), bytes.Equal) {
			t.Errorf("%s labelled %v, not a leaf certificate's Secret, is cached with %q", other.Name, other.Labels, got.Data)
		}
	}
}

// kubeControllerManagerConsumer is a Deployment of Cluster prod's that mounts
// its kube-controller-manager Secret, whose name it returns too.
func kubeControllerManagerConsumer() (string, *appsv1.Deployment) {
	kcm := credentials.CertificateSecretName("prod", credentials.CertKubeControllerManager)
	return kcm, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "prod-kube-controller-manager", Namespace: "fleet", Labels: map[string]string{v1alpha1.LabelCluster: "prod"}},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{
			{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: kcm}}},
		}}}},
	}
}

// credentialsChecksumOf is the credentials checksum consumer's template has
// on api.
func credentialsChecksumOf(t *testing.T, api client.Reader, consumer *appsv1.Deployment) string {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(consumer), d); err != nil {
		t.Fatal(err)
	}
	return d.Spec.Template.Annotations[v1alpha1.AnnotationCredentialsChecksum]
}

// TestUnchangedClusterReadThroughTheCacheWritesNothing reconciles a Cluster
// whose credentials are in place, reading its Secrets as the manager's cache
// holds them: nothing is written, the consumer keeps its checksum, and a
// derived value changed behind the operator's back, even to a digest, is
// written back.
func TestUnchangedClusterReadThroughTheCacheWritesNothing(t *testing.T) {
	kcm, consumer := kubeControllerManagerConsumer()
	sc := newSettledCluster(t, consumer)
	api, c, ctx, reconcile := sc.api, sc.cluster(), context.Background(), sc.reconcile
	checksum := func() string { return credentialsChecksumOf(t, api, consumer) }
	readKubeconfig := func() []byte {
		t.Helper()
		s := &corev1.Secret{}
		if err := api.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: kcm}, s); err != nil {
			t.Fatal(err)
		}
		return s.Data[v1alpha1.DataKeyKubeconfig]
	}
	stamped, kubeconfig := checksum(), readKubeconfig()
	if stamped == "" || len(kubeconfig) == 0 {
		t.Fatalf("the settled Cluster has no consumer checksum (%q) or kubeconfig (%d bytes)", stamped, len(kubeconfig))
	}

	api.throughCache.Store(true)
	keys, settled := pki.KeysGenerated(), api.writes.Load()
	reconcile()
	if generated, written := pki.KeysGenerated()-keys, api.writes.Load()-settled; generated != 0 || written != 0 {
		t.Errorf("reading through the cache, an unchanged Cluster's reconcile generated %d keys and made %d writes", generated, written)
	}
	if got := checksum(); got != stamped {
		t.Errorf("the consumer's checksum moved from %s to %s", stamped, got)
	}

	digest := sha256.Sum256(kubeconfig)
	for _, changed := range [][]byte{[]byte("changed"), digest[:]} {
		s := &corev1.Secret{}
		if err := api.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: kcm}, s); err != nil {
			t.Fatal(err)
		}
		s.Data[v1alpha1.DataKeyKubeconfig] = changed
		if err := api.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		reconcile()
		if got := readKubeconfig(); string(got) != string(kubeconfig) {
			t.Errorf("a kubeconfig changed to %q is %q after a reconcile, want it written back", changed, got)
		}
	}
}

// A consumer is not rolled back to the checksum of a Secret the cache shows
// from before its last write: the pass that would is retried.
func TestAConsumerIsNotRolledBackToASecretTheCacheShowsBehind(t *testing.T) {
	kcm, consumer := kubeControllerManagerConsumer()
	sc := newSettledCluster(t, consumer)
	api, ctx := sc.api, context.Background()
	checksum := func() string { return credentialsChecksumOf(t, api, consumer) }
	before := &corev1.Secret{}
	if err := api.Get(ctx, client.ObjectKey{Namespace: "fleet", Name: kcm}, before); err != nil {
		t.Fatal(err)
	}
	// The certificate is issued again (its Secret's pair was broken), and
	// the consumer rolled to it.
	broken := before.DeepCopy()
	broken.Data[v1alpha1.DataKeyCertificate] = []byte("not a certificate")
	if err := api.Update(ctx, broken); err != nil {
		t.Fatal(err)
	}
	sc.reconcile()
	rolled := checksum()
	if rolled == "" {
		t.Fatal("the consumer has no checksum")
	}
	// A cache behind shows the Secret as it was: a valid pair, which the
	// pass would keep, and whose checksum is not the consumer's any more.
	api.behind = map[string]*corev1.Secret{kcm: before}
	if result, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key}); err != nil || result.RequeueAfter != time.Second {
		t.Errorf("the pass on a cache behind ended with %+v, %v; want it retried in a second", result, err)
	}
	if got := checksum(); got != rolled {
		t.Errorf("the consumer was rolled from %s to %s, the checksum of the Secret the cache showed behind", rolled, got)
	}
}
