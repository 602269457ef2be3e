package workerrollout

import (
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/pki/pkitest"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// TestRollWritesTheVersionsField: the rollout time goes where the served
// Cluster API version takes it, next to the phase it is for, and reads back.
func TestRollWritesTheVersionsField(t *testing.T) {
	at := time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)
	for version, field := range rolloutAfterField {
		t.Run(version, func(t *testing.T) {
			gvk := schema.GroupVersionKind{Group: clusterAPIGroup, Version: version, Kind: kindMachineDeployment}
			md := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": int64(2)}}}
			md.SetGroupVersionKind(gvk)
			md.SetNamespace("team-a")
			md.SetName("edge")
			c := fake.NewClientBuilder().WithObjects(md).Build()
			p := &ReplaceRollout{Management: c}
			if err := p.roll(context.Background(), md, field, "2026-11-24T19:00:00Z/Preparing", at); err != nil {
				t.Fatal(err)
			}
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(gvk)
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(md), got); err != nil {
				t.Fatal(err)
			}
			after, err := rolloutAfter(got, field)
			if err != nil || !after.Equal(at) {
				t.Fatalf("rollout time = %v, %v; want %v", after, err, at)
			}
			if a := got.GetAnnotations()[v1alpha1.AnnotationRolledFor]; a != "2026-11-24T19:00:00Z/Preparing" {
				t.Fatalf("%s = %q", v1alpha1.AnnotationRolledFor, a)
			}
			if a := got.GetAnnotations()[v1alpha1.AnnotationRolloutAfter]; a != "2026-11-24T20:00:00Z" {
				t.Fatalf("%s = %q, want the rollout time recorded", v1alpha1.AnnotationRolloutAfter, a)
			}
			if replicas, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas"); replicas != 2 {
				t.Fatalf("spec.replicas = %d: the patch changed another field", replicas)
			}
		})
	}
}

func TestRolloutAfterRefusesATimeItCannotRead(t *testing.T) {
	md := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"rolloutAfter": "yesterday"}}}
	if _, err := rolloutAfter(md, rolloutAfterField["v1beta1"]); err == nil {
		t.Fatal("rolloutAfter accepted \"yesterday\"")
	}
	if after, err := rolloutAfter(md, rolloutAfterField["v1beta2"]); err != nil || !after.IsZero() {
		t.Fatalf("no spec.rollout.after: got %v, %v; want zero", after, err)
	}
}

func TestMachineDeploymentHeld(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name    string
		version string
		object  map[string]any
		deleted bool
		want    string
	}{
		{"rolling update", "v1beta2", map[string]any{"spec": map[string]any{"rollout": map[string]any{"strategy": map[string]any{"type": "RollingUpdate"}}}}, false, ""},
		{"no strategy set", "v1beta1", map[string]any{"spec": map[string]any{}}, false, ""},
		{"paused", "v1beta2", map[string]any{"spec": map[string]any{"paused": true}}, false, "MachineDeployment edge is paused (spec.paused): resume it"},
		{"paused annotation", "v1beta2", map[string]any{"metadata": map[string]any{"annotations": map[string]any{"cluster.x-k8s.io/paused": ""}}},
			false, "MachineDeployment edge carries the cluster.x-k8s.io/paused annotation: remove it"},
		{"OnDelete in v1beta2", "v1beta2", map[string]any{"spec": map[string]any{"rollout": map[string]any{"strategy": map[string]any{"type": "OnDelete"}}}},
			false, "MachineDeployment edge rolls OnDelete, which replaces a Machine only once it is deleted: delete the old Machines"},
		{"OnDelete in v1beta1", "v1beta1", map[string]any{"spec": map[string]any{"strategy": map[string]any{"type": "OnDelete"}}},
			false, "MachineDeployment edge rolls OnDelete, which replaces a Machine only once it is deleted: delete the old Machines"},
		{"v1beta1's field is not v1beta2's", "v1beta2", map[string]any{"spec": map[string]any{"strategy": map[string]any{"type": "OnDelete"}}}, false, ""},
		{"being deleted", "v1beta2", map[string]any{"spec": map[string]any{}}, true, "MachineDeployment edge is being deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := &unstructured.Unstructured{Object: tc.object}
			md.SetName("edge")
			if tc.deleted {
				md.SetDeletionTimestamp(&now)
			}
			if got := machineDeploymentHeld(md, tc.version); got != tc.want {
				t.Errorf("machineDeploymentHeld = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestEachMachineDeploymentRolledIsAnEvent: two pools rolled while the
// Cluster does not change are two events, each naming its MachineDeployment,
// through client-go's events library, which folds an event into an earlier
// one's series when their type, reason, action, regarding and related object
// are the same.
func TestEachMachineDeploymentRolledIsAnEvent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := kubefake.NewClientset()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: sink.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()
	p := &ReplaceRollout{Recorder: broadcaster.NewRecorder(scheme.New(), "carousel")}

	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge", UID: "edge-uid", ResourceVersion: "7"}}
	c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{
		CertificateAuthorities: &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing}}}
	at := time.Date(2026, 11, 27, 16, 0, 0, 0, time.UTC)
	for _, name := range []string{"edge-pool-a", "edge-pool-b"} {
		md := &unstructured.Unstructured{}
		md.SetGroupVersionKind(schema.GroupVersionKind{Group: clusterAPIGroup, Version: "v1beta2", Kind: kindMachineDeployment})
		md.SetNamespace(c.Namespace)
		md.SetName(name)
		md.SetResourceVersion("3")
		p.recordRolled(c, strings.TrimPrefix(name, "edge-"), md, rolloutAfterField["v1beta2"], at, WriteRoll)
	}

	var notes []string
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := sink.EventsV1().Events(c.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		notes = notes[:0]
		for _, e := range list.Items {
			notes = append(notes, e.Note)
		}
		return len(notes) == 2, nil
	})
	if err != nil {
		t.Fatalf("events %q, want one for each MachineDeployment: %v", notes, err)
	}
	for _, name := range []string{"edge-pool-a", "edge-pool-b"} {
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "MachineDeployment "+name+" to") }) {
			t.Errorf("no event names MachineDeployment %s: %q", name, notes)
		}
	}
}

// TestBootstrapTrustPublished: a Replace pool rolls only once the bootstrap
// kubeconfig that new Machines start with trusts exactly the cluster CAs of
// now (written by another controller, it can lag behind a phase).
func TestBootstrapTrustPublished(t *testing.T) {
	ca0, ca1 := pkitest.NewCA(t, "cluster CA0"), pkitest.NewCA(t, "cluster CA1")
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	pool := v1alpha1.WorkerPool{Name: "edge", RolloutStrategy: v1alpha1.RolloutReplace, MachineDeployment: "edge"}
	kubeconfig := func(bundle pki.Bundle) client.Object { return bootstrapKubeconfigSecret(t, c, bundle) }
	caSecret := func(cas *credentials.CAs) client.Object { return caSecret(t, c, v1alpha1.CARoleCluster, cas) }
	preparing := &credentials.CAs{Current: ca1, Previous: ca0, Rotation: "2026-11-30T09:00:00Z"}
	finalized := &credentials.CAs{Current: ca1, Rotation: "2026-11-30T09:00:00Z"}
	for _, tc := range []struct {
		name    string
		objects []client.Object
		rolls   bool
	}{
		{"Preparing: the kubeconfig trusts the old CA alone still", []client.Object{caSecret(preparing), kubeconfig(pki.NewBundle(ca0.Cert))}, false},
		{"Preparing: the kubeconfig trusts both CAs", []client.Object{caSecret(preparing), kubeconfig(pki.NewBundle(ca1.Cert, ca0.Cert))}, true},
		{"Finalizing: the kubeconfig trusts the old CA still", []client.Object{caSecret(finalized), kubeconfig(pki.NewBundle(ca1.Cert, ca0.Cert))}, false},
		{"Finalizing: the kubeconfig trusts the new CA alone", []client.Object{caSecret(finalized), kubeconfig(pki.NewBundle(ca1.Cert))}, true},
		{"no bootstrap kubeconfig yet", []client.Object{caSecret(preparing)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wait, err := bootstrapTrustPublished(context.Background(), fake.NewClientBuilder().WithObjects(tc.objects...).Build(), c, pool)
			if err != nil {
				t.Fatal(err)
			}
			if rolls := wait == ""; rolls != tc.rolls {
				t.Errorf("bootstrapTrustPublished = %q; want a roll: %t", wait, tc.rolls)
			}
			if wait != "" && !strings.Contains(wait, credentials.BootstrapKubeconfigSecretName(c.Name)) {
				t.Errorf("the wait %q does not name the Secret", wait)
			}
		})
	}
}

// A bootstrap kubeconfig that names files on the operator's machine (it is
// in the tenant's namespace) is only decoded: what the pool waits for says
// nothing of whether the files exist.
func TestABootstrapKubeconfigThatNamesFilesIsNotRead(t *testing.T) {
	ca0 := pkitest.NewCA(t, "cluster CA0")
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	pool := v1alpha1.WorkerPool{Name: "edge", RolloutStrategy: v1alpha1.RolloutReplace, MachineDeployment: "edge"}
	existing := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(existing, ca0.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	var waits []string
	for _, file := range []string{existing, existing + ".missing"} {
		kubeconfig := bootstrapKubeconfigSecret(t, c, pki.NewBundle(ca0.Cert))
		kubeconfig.Data[v1alpha1.DataKeyKubeconfig] = []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://192.0.2.1", certificate-authority: "` + file + `"}}]
users: [{name: u, user: {client-certificate: "` + file + `", client-key: "` + file + `", tokenFile: "` + file + `"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
		r := fake.NewClientBuilder().WithObjects(caSecret(t, c, v1alpha1.CARoleCluster, &credentials.CAs{Current: ca0}), kubeconfig).Build()
		wait, err := bootstrapTrustPublished(context.Background(), r, c, pool)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, wait)
	}
	if waits[0] == "" || waits[0] != waits[1] {
		t.Errorf("waits %q: want one wait whether the file exists or not", waits)
	}
}

// bootstrapKubeconfigSecret is c's bootstrap kubeconfig as the kubelet
// bootstrap controller writes it, trusting bundle.
func bootstrapKubeconfigSecret(t *testing.T, c *v1alpha1.Cluster, bundle pki.Bundle) *corev1.Secret {
	t.Helper()
	data, err := bootstrap.Kubeconfig("https://192.0.2.10:6443", bundle.PEM(), bootstrap.Token{ID: "abcdef", Secret: "0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.BootstrapKubeconfigSecretName(c.Name)},
		Data: map[string][]byte{v1alpha1.DataKeyKubeconfig: data}}
}

// caSecret is the Secret of c's CAs of role.
func caSecret(t *testing.T, c *v1alpha1.Cluster, role v1alpha1.CARole, cas *credentials.CAs) *corev1.Secret {
	t.Helper()
	data, err := credentials.EncodeCASecretData(cas)
	if err != nil {
		t.Fatal(err)
	}
	annotations := map[string]string{v1alpha1.AnnotationRotation: cas.Rotation}
	if cas.AbortedRotation != "" {
		annotations[v1alpha1.AnnotationAbortedRotation] = cas.AbortedRotation
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.CASecretName(c.Name, role),
		Annotations: annotations}, Data: data}
}

// managedClients is one managed cluster's client.
type managedClients map[client.ObjectKey]client.Client

func (m managedClients) Client(c *v1alpha1.Cluster) (client.Client, bool) {
	remote, ok := m[client.ObjectKeyFromObject(c)]
	return remote, ok
}

// TestReplaceRollsOnlyOnceTheBootstrapKubeconfigTrustsThePhasesCAs: in
// Preparing, with the API server already trusting the new client CA, a
// Replace pool's MachineDeployment is left alone while the bootstrap
// kubeconfig trusts the old cluster CA alone, and rolled once it trusts
// both.
func TestReplaceRollsOnlyOnceTheBootstrapKubeconfigTrustsThePhasesCAs(t *testing.T) {
	ctx := context.Background()
	started := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge"}}
	c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{
		Phase: v1alpha1.RotationPreparing, LastInitiationTime: &metav1.Time{Time: started}}}}
	pool := v1alpha1.WorkerPool{Name: "pool-a", RolloutStrategy: v1alpha1.RolloutReplace, MachineDeployment: "edge-pool-a"}

	clientCA0, clientCA1 := pkitest.NewCA(t, "client CA0"), pkitest.NewCA(t, "client CA1")
	clusterCA0, clusterCA1 := pkitest.NewCA(t, "cluster CA0"), pkitest.NewCA(t, "cluster CA1")
	rotation := started.Format(time.RFC3339)
	operatorCert, err := clientCA1.IssueKeyPair(pki.LeafTemplate{CommonName: "carousel-operator", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		Validity: time.Hour}, pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	gvk := schema.GroupVersionKind{Group: clusterAPIGroup, Version: "v1beta2", Kind: kindMachineDeployment}
	md := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": int64(1)}}}
	md.SetGroupVersionKind(gvk)
	md.SetNamespace(c.Namespace)
	md.SetName(pool.MachineDeployment)
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{gvk.GroupVersion()})
	mapper.Add(gvk, meta.RESTScopeNamespace)
	stale := bootstrapKubeconfigSecret(t, c, pki.NewBundle(clusterCA0.Cert))
	management := fake.NewClientBuilder().WithRESTMapper(mapper).WithObjects(md, stale,
		caSecret(t, c, v1alpha1.CARoleClient, &credentials.CAs{Current: clientCA1, Previous: clientCA0, Rotation: rotation}),
		caSecret(t, c, v1alpha1.CARoleCluster, &credentials.CAs{Current: clusterCA1, Previous: clusterCA0, Rotation: rotation}),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.CertificateSecretName(c.Name, credentials.CertOperator)},
			Data: map[string][]byte{v1alpha1.DataKeyCertificate: operatorCert.CertPEM()}},
	).Build()
	p := &ReplaceRollout{
		Connections: managedClients{client.ObjectKeyFromObject(c): fake.NewClientBuilder().Build()},
		Management:  management, Uncached: management, Clock: clocktesting.NewFakePassiveClock(started.Add(time.Minute)),
		Recorder: events.NewFakeRecorder(10),
	}
	rolledFor := func() string {
		t.Helper()
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(gvk)
		if err := management.Get(ctx, client.ObjectKeyFromObject(md), got); err != nil {
			t.Fatal(err)
		}
		return got.GetAnnotations()[v1alpha1.AnnotationRolledFor]
	}

	done, message, err := p.Rollout(ctx, c, pool)
	if err != nil || done || !strings.Contains(message, credentials.BootstrapKubeconfigSecretName(c.Name)) {
		t.Fatalf("Rollout with a bootstrap kubeconfig of the old CA alone = %t, %q, %v; want a wait for the kubeconfig", done, message, err)
	}
	if a := rolledFor(); a != "" {
		t.Fatalf("the MachineDeployment was rolled (%s=%q) while new Machines would bootstrap trusting the old cluster CA alone", v1alpha1.AnnotationRolledFor, a)
	}

	stale.Data = bootstrapKubeconfigSecret(t, c, pki.NewBundle(clusterCA1.Cert, clusterCA0.Cert)).Data
	if err := management.Update(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if done, message, err := p.Rollout(ctx, c, pool); err != nil || done {
		t.Fatalf("Rollout with the bootstrap kubeconfig published = %t, %q, %v; want the pool rolling", done, message, err)
	}
	if a, want := rolledFor(), noderenewal.RequestFor(c.CARotation()).String(); a != want {
		t.Fatalf("%s = %q after the bootstrap kubeconfig trusts both cluster CAs; want %q", v1alpha1.AnnotationRolledFor, a, want)
	}
}
