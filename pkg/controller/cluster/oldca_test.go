package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/oldca"
)

func TestNodeFactsTakeNodesTheRolloutSkippedForOffline(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	c := &v1alpha1.Cluster{Spec: v1alpha1.ClusterSpec{Workers: []v1alpha1.WorkerPool{
		{Name: "patient", OfflineNodeTimeout: &metav1.Duration{Duration: time.Hour}},
		{Name: "default"},
	}}}
	node := func(name, pool, issuer string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelPool: pool},
			Annotations: map[string]string{v1alpha1.AnnotationClientCertificateIssuer: issuer}}}
	}
	lease := func(name string, ago time.Duration) coordinationv1.Lease {
		return coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now.Add(-ago)}}}
	}
	away := v1alpha1.DefaultOfflineNodeTimeout + time.Minute
	got := nodeFacts(c,
		[]corev1.Node{node("up", "default", "aa"), node("gone", "default", "bb"), node("waited-for", "patient", "bb"), node("no-pool", "", "bb"),
			node("ahead", "default", "aa")},
		[]coordinationv1.Lease{lease("up", 0), lease("gone", away), lease("waited-for", away), lease("no-pool", away),
			lease("ahead", -time.Hour)}, // its node's clock an hour ahead: it puts no other node behind
		now)
	want := []oldca.Node{{Name: "up", ClientIssuer: "aa"}, {Name: "gone", ClientIssuer: "bb", Offline: true},
		{Name: "waited-for", ClientIssuer: "bb"}, {Name: "no-pool", ClientIssuer: "bb", Offline: true}, {Name: "ahead", ClientIssuer: "aa"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("node %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestOldCAUsageGateReadsTheRecordsPastTheCache brings a Cluster to Prepared
// and lets the gate judge it from its records as the manager's cache lists
// them, without their data (cacheConfigMap): the gate reads them from the
// API server, and finds in them a recent audit event and a kubeconfig that
// the old client CA signed.
func TestOldCAUsageGateReadsTheRecordsPastTheCache(t *testing.T) {
	c := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "fleet", UID: "prod-uid"},
		Spec:       v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"},
	}
	api := newFakeAPI(c)
	clk := clocktesting.NewFakeClock(time.Now())
	r := &Reconciler{Client: api, APIReader: api.apiServer, Clock: clk, Recorder: events.NewFakeRecorder(1000), indexedByCluster: true}
	ctx, key := context.Background(), client.ObjectKeyFromObject(c)
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		if err := api.Get(ctx, key, c); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		reconcile()
	}
	c.Annotations = map[string]string{v1alpha1.OperationAnnotation: v1alpha1.OperationStartCARotation}
	if err := api.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	for i := 0; c.CARotationPhase() != v1alpha1.RotationPrepared; i++ {
		if i == 10 {
			t.Fatalf("the rotation is %s after %d reconciles, want Prepared", c.CARotationPhase(), i)
		}
		reconcile()
	}
	clk.Step(oldca.Settling + time.Minute) // past the collecting
	now := clk.Now()

	secret := func(name string) *corev1.Secret {
		t.Helper()
		s := &corev1.Secret{}
		if err := api.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	block, _ := pem.Decode(secret(credentials.CertificateSecretName(c.Name, credentials.CertOperator)).Data[v1alpha1.DataKeyCertificate])
	if block == nil {
		t.Fatal("the operator's certificate is not PEM")
	}
	operator := sha256.Sum256(block.Bytes)
	clientCAs, err := credentials.DecodeCASecret(secret(credentials.CASecretName(c.Name, v1alpha1.CARoleClient)))
	if err != nil || clientCAs.Previous == nil {
		t.Fatalf("the client CAs of a Prepared rotation: %v, %v", clientCAs, err)
	}
	usage := &oldca.Usage{Credentials: []oldca.Credential{{User: "carousel:operator", Fingerprint: hex.EncodeToString(operator[:]), FirstSeen: now, LastSeen: now}}}
	kubeconfigs := &oldca.Kubeconfigs{Issued: []oldca.IssuedCertificate{{User: "carousel:admin:alice", Fingerprint: strings.Repeat("ab", sha256.Size),
		Issuer: hex.EncodeToString(clientCAs.Previous.Cert.SubjectKeyId), IssuedAt: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}}}
	for name, data := range map[string]map[string]string{
		credentials.CertificateUsageConfigMapName(c.Name):  {oldca.DataKey: usage.String()},
		credentials.IssuedKubeconfigsConfigMapName(c.Name): {oldca.KubeconfigsDataKey: kubeconfigs.String()},
	} {
		if err := api.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name,
			Labels: map[string]string{v1alpha1.LabelCluster: c.Name}}, Data: data}); err != nil {
			t.Fatal(err)
		}
	}

	api.throughCache.Store(true)
	reconcile()
	got := c.CARotation().OldCAUsage
	if got == nil || !got.AuditEventsReceived {
		t.Fatalf("old-CA usage = %+v, want the audit events received", got)
	}
	var names []string
	for _, d := range got.Dependents {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, []string{"carousel:admin:alice"}) {
		t.Errorf("dependents of the old CAs = %v (%+v), want the holder of the old-CA kubeconfig only: the audit events are recent", names, got.Dependents)
	}
}

// A start records the usage record the API server holds, also one the cache
// does not show yet (the first audit batch created it just before): the
// gate would otherwise miss that record's deletion.
func TestAStartRecordsTheUsageRecordTheCacheDoesNotShowYet(t *testing.T) {
	record := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: credentials.CertificateUsageConfigMapName("prod"), UID: "record-uid",
		Labels: map[string]string{v1alpha1.LabelCluster: "prod"}}}
	sc := newSettledCluster(t, record)
	sc.api.uncached = map[string]bool{record.Name: true}
	sc.annotate(v1alpha1.OperationStartCARotation)
	sc.statusWritesUntil(v1alpha1.RotationPreparing)
	if got := sc.cluster().CARotation().UsageRecordUID; got != record.UID {
		t.Errorf("usageRecordUID %q, want the record's %q", got, record.UID)
	}
}
