package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/oldca"
	"github.com/carousel-dev/carousel/pkg/pki/pkitest"
)

func TestNodeFactsTakeNodesTheRolloutSkippedForOfflineAndNodesNoRolloutMoved(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	c := &v1alpha1.Cluster{Spec: v1alpha1.ClusterSpec{Workers: []v1alpha1.WorkerPool{
		{Name: "patient", OfflineNodeTimeout: &metav1.Duration{Duration: time.Hour}, RolloutStrategy: v1alpha1.RolloutInPlace},
		{Name: "default", RolloutStrategy: v1alpha1.RolloutInPlace},
		{Name: "machines", RolloutStrategy: v1alpha1.RolloutReplace, MachineDeployment: "machines"},
		{Name: "by-hand", RolloutStrategy: v1alpha1.RolloutManual},
		{Name: "rolled-by-hand", RolloutStrategy: v1alpha1.RolloutInPlace},
		{Name: "added", RolloutStrategy: v1alpha1.RolloutManual},
	}}}
	c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{
		Phase: v1alpha1.RotationPrepared, PoolsRolledByHand: []string{"by-hand", "rolled-by-hand"}}}}
	started := now.Add(-time.Hour)
	node := func(name, pool, issuer string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelPool: pool},
			Annotations:       map[string]string{v1alpha1.AnnotationClientCertificateIssuer: issuer, v1alpha1.AnnotationTrustBundle: "published"},
			CreationTimestamp: metav1.NewTime(started.Add(-time.Hour))}}
	}
	reporting := func(n corev1.Node, bundle string) corev1.Node {
		n.Annotations[v1alpha1.AnnotationTrustBundle] = bundle
		return n
	}
	marked := func(n corev1.Node) corev1.Node {
		n.Annotations[v1alpha1.AnnotationNodeAgent] = "v1"
		return n
	}
	registered := func(n corev1.Node, at time.Time) corev1.Node {
		n.CreationTimestamp = metav1.NewTime(at)
		return n
	}
	lease := func(name string, ago time.Duration) coordinationv1.Lease {
		return coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now.Add(-ago)}}}
	}
	away := v1alpha1.DefaultOfflineNodeTimeout + time.Minute
	nodes := []corev1.Node{node("up", "default", "aa"), node("gone", "default", "bb"), node("waited-for", "patient", "bb"),
		reporting(node("no-pool", "", "bb"), ""), node("ahead", "default", "aa"), reporting(node("typo", "dfault", "aa"), ""),
		node("moved", "", "aa"), // its node agent reports the published cluster bundle
		reporting(node("moved-before", "", "aa"), "before"),
		reporting(node("never-asked", "default", "aa"), ""), // labelled into a pool that rolled before it
		reporting(node("left-in-place", "machines", "aa"), ""), reporting(registered(node("replaced", "machines", "aa"), started.Add(time.Minute)), ""),
		reporting(node("reported", "by-hand", "aa"), ""), reporting(node("reported-in-place", "rolled-by-hand", "aa"), ""),
		reporting(node("added", "added", "aa"), ""),                                   // its pool added since the start, and not reported by hand
		reporting(registered(node("joined", "", "aa"), started.Add(time.Second)), ""), // registered since the start, with the bundles published then
		marked(reporting(node("marked", "by-hand", ""), "")),                          // a node agent runs on it, and has not reported
		node("catching-up", "default", "bb")}                                          // behind, not for long enough to be offline
	var leases []coordinationv1.Lease
	for _, n := range nodes {
		switch n.Name {
		case "gone", "waited-for", "no-pool", "marked", "catching-up":
			leases = append(leases, lease(n.Name, away))
		case "ahead":
			leases = append(leases, lease(n.Name, -time.Hour)) // its node's clock an hour ahead: it puts no other node behind
		default:
			leases = append(leases, lease(n.Name, 0))
		}
	}
	offline := func(name string, behind bool) bool { return behind && name != "catching-up" }
	got := nodeFacts(c, nodes, leases, "published", offline, started, now)
	// The nodes of InPlace pools run the node agent (InPlace).
	want := []oldca.Node{{Name: "up", ClientIssuer: "aa", InPlace: true}, {Name: "gone", ClientIssuer: "bb", Offline: true, InPlace: true},
		{Name: "waited-for", ClientIssuer: "bb", InPlace: true},
		{Name: "no-pool", ClientIssuer: "bb", Offline: true, Unrolled: "it has no carousel.dev/pool label"}, {Name: "ahead", ClientIssuer: "aa", InPlace: true},
		{Name: "typo", ClientIssuer: "aa", Unrolled: `its carousel.dev/pool label, "dfault", names no worker pool of the Cluster`},
		{Name: "moved", ClientIssuer: "aa"}, {Name: "moved-before", ClientIssuer: "aa", Unrolled: "it has no carousel.dev/pool label"},
		// In a pool: unrolled when Carousel's rollout finished without it;
		// as the user reported it when rolled by hand.
		{Name: "never-asked", ClientIssuer: "aa", InPlace: true, Unrolled: "its worker pool default rolled without it (it was offline then, or labelled into the pool, or the pool added, since)"},
		{Name: "left-in-place", ClientIssuer: "aa", Unrolled: "its worker pool machines rolled without it (it was offline then, or labelled into the pool, or the pool added, since)"},
		{Name: "replaced", ClientIssuer: "aa"}, {Name: "reported", ClientIssuer: "aa"}, {Name: "reported-in-place", ClientIssuer: "aa", InPlace: true},
		{Name: "added", ClientIssuer: "aa", Unrolled: "its worker pool added rolled without it (it was offline then, or labelled into the pool, or the pool added, since)"},
		{Name: "joined", ClientIssuer: "aa"}, {Name: "marked", Offline: true, Agent: true}, {Name: "catching-up", ClientIssuer: "bb", InPlace: true}}
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

	secret := func(name string) *corev1.Secret { return getSecret(t, api, c.Namespace, name) }
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

// A client Carousel does not move to the new client CA (one signed from the
// client CA by hand) counts while its last use is within the window, before
// Prepared too: nothing moved it since. One of Carousel's own certificate
// users, which the rotation renewed in Preparing, counts from Prepared only.
func TestTheGateCountsUsesBeforePreparedOfClientsCarouselDoesNotMove(t *testing.T) {
	sc := newSettledCluster(t)
	clk := clocktesting.NewFakeClock(time.Now())
	sc.r.Clock = clk
	sc.annotate(v1alpha1.OperationStartCARotation)
	sc.statusWritesUntil(v1alpha1.RotationPrepared)
	prepared := sc.cluster().CARotation().LastInitiationFinishedTime.Time
	clk.Step(oldca.Settling + time.Minute) // past the collecting
	now := clk.Now()
	seen := func(user string, fingerprint byte, first, last time.Time) oldca.Credential {
		return oldca.Credential{User: user, Fingerprint: strings.Repeat(fmt.Sprintf("%02x", fingerprint), sha256.Size), FirstSeen: first, LastSeen: last}
	}
	usage := &oldca.Usage{Credentials: []oldca.Credential{
		seen("ci-robot", 1, prepared.Add(-2*time.Hour), prepared.Add(-time.Minute)),
		seen("ci-retired", 2, prepared.Add(-3*time.Hour), now.Add(-DefaultOldCAUsageWindow-oldca.Settling-time.Second)),
		seen("carousel:operator", 3, prepared.Add(-2*time.Hour), prepared.Add(-time.Second)), // its certificate before the renewal
		seen("system:node:worker-1", 4, now, now),                                            // first seen after the start: the audit events are heard
	}}
	if err := sc.api.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet",
		Name: credentials.CertificateUsageConfigMapName("prod"), Labels: map[string]string{v1alpha1.LabelCluster: "prod"}},
		Data: map[string]string{oldca.DataKey: usage.String()}}); err != nil {
		t.Fatal(err)
	}
	sc.reconcile()
	got := sc.cluster().CARotation().OldCAUsage
	var names []string
	for _, d := range got.Dependents {
		names = append(names, string(d.Kind)+"/"+d.Name)
	}
	if want := []string{"User/ci-robot"}; !slices.Equal(names, want) {
		t.Errorf("dependents of the old CAs = %v (%+v), want %v", names, got.Dependents, want)
	}
}

// A completion on a verdict of the old-CA usage gate that this process did not
// reach (another replica's, or its own before a restart) waits for a pass of
// its own to judge: a user who took a kubeconfig from the old client CA while
// the manager was down holds it, asked for now or queued for the maintenance
// window.
func TestACompletionAfterARestartWaitsForTheGateToJudgeAgain(t *testing.T) {
	for _, annotation := range []string{v1alpha1.OperationAnnotation, v1alpha1.MaintenanceOperationAnnotation} {
		t.Run(annotation, func(t *testing.T) {
			sc := newSettledCluster(t)
			sc.annotate(v1alpha1.OperationStartCARotation)
			sc.statusWritesUntil(v1alpha1.RotationPrepared)
			sc.reconcile()
			c := sc.cluster()
			if u := c.CARotation().OldCAUsage; u == nil || u.Total != 0 {
				t.Fatalf("old-CA usage %+v in Prepared, want a verdict that names no one", u)
			}

			restarted, _ := reconcilerOn(sc.api)
			restarted.Recommendations = sc.r.Recommendations
			clientCAs, err := credentials.DecodeCASecret(getSecret(t, sc.api, c.Namespace, credentials.CASecretName(c.Name, v1alpha1.CARoleClient)))
			if err != nil || clientCAs.Previous == nil {
				t.Fatalf("the client CAs of a Prepared rotation: %v, %v", clientCAs, err)
			}
			now := time.Now()
			kubeconfigs := &oldca.Kubeconfigs{Issued: []oldca.IssuedCertificate{{User: "carousel:admin:alice", Fingerprint: strings.Repeat("ab", sha256.Size),
				Issuer: hex.EncodeToString(clientCAs.Previous.Cert.SubjectKeyId), IssuedAt: now.Add(-time.Minute), NotAfter: now.Add(time.Hour)}}}
			if err := sc.api.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace,
				Name: credentials.IssuedKubeconfigsConfigMapName(c.Name), Labels: map[string]string{v1alpha1.LabelCluster: c.Name}},
				Data: map[string]string{oldca.KubeconfigsDataKey: kubeconfigs.String()}}); err != nil {
				t.Fatal(err)
			}
			metav1.SetMetaDataAnnotation(&c.ObjectMeta, annotation, v1alpha1.OperationCompleteCARotation)
			// A window open from an hour ago to an hour from now (the reconcilers run on the real clock).
			c.Spec.Maintenance = &v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{
				Begin: now.UTC().Add(-time.Hour).Format("150405-0700"), End: now.UTC().Add(time.Hour).Format("150405-0700")}}
			if err := sc.api.Update(context.Background(), c); err != nil {
				t.Fatal(err)
			}

			result, err := restarted.Reconcile(context.Background(), ctrl.Request{NamespacedName: sc.key})
			if err != nil {
				t.Fatal(err)
			}
			c = sc.cluster()
			if c.Annotations[annotation] != v1alpha1.OperationCompleteCARotation || c.CARotationPhase() != v1alpha1.RotationPrepared {
				t.Fatalf("annotations %v, phase %q after the restarted manager's first pass; want the completion waiting, in Prepared", c.Annotations, c.CARotationPhase())
			}
			if annotation == v1alpha1.OperationAnnotation && (result.RequeueAfter <= 0 || result.RequeueAfter > time.Second) {
				t.Errorf("the first pass asks to look again in %v, want a second at most", result.RequeueAfter)
			}
			if u := c.CARotation().OldCAUsage; u == nil || u.Total != 1 {
				t.Fatalf("old-CA usage %+v after the first pass, want alice named", u)
			}
			if _, err := restarted.Reconcile(context.Background(), ctrl.Request{NamespacedName: sc.key}); err != nil {
				t.Fatal(err)
			}
			c = sc.cluster()
			if _, asked := c.Annotations[v1alpha1.OperationAnnotation]; asked || c.CARotationPhase() != v1alpha1.RotationPrepared {
				t.Errorf("annotations %v, phase %q; want no completion under way, in Prepared", c.Annotations, c.CARotationPhase())
			}
			refused := eventReasons(restarted.Recorder.(*events.FakeRecorder))[v1alpha1.EventOperationRefused]
			if annotation == v1alpha1.OperationAnnotation && refused != 1 {
				t.Errorf("%d OperationRefused events, want one for the completion asked for now", refused)
			}
			if annotation == v1alpha1.MaintenanceOperationAnnotation {
				if refused != 0 || c.Annotations[annotation] != v1alpha1.OperationCompleteCARotation {
					t.Errorf("%d OperationRefused events, annotations %v; want the completion still queued", refused, c.Annotations)
				}
				if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionMaintenanceOperationQueued); cond == nil || cond.Reason != v1alpha1.ReasonOldCADependents {
					t.Errorf("MaintenanceOperationQueued %+v, want it waiting for the old-CA usage gate", cond)
				}
			}
		})
	}
}

// After a restart, a completion on a gate that still names no one goes ahead
// once the restarted manager has judged: it waits one pass, not more.
func TestACompletionAfterARestartGoesAheadOnceTheGateJudged(t *testing.T) {
	sc := newSettledCluster(t)
	sc.annotate(v1alpha1.OperationStartCARotation)
	sc.statusWritesUntil(v1alpha1.RotationPrepared)
	sc.reconcile()
	restarted, _ := reconcilerOn(sc.api)
	restarted.Recommendations = sc.r.Recommendations
	sc.annotate(v1alpha1.OperationCompleteCARotation)
	for pass, want := range []v1alpha1.CARotationPhase{v1alpha1.RotationPrepared, v1alpha1.RotationFinalizing} {
		if _, err := restarted.Reconcile(context.Background(), ctrl.Request{NamespacedName: sc.key}); err != nil {
			t.Fatal(err)
		}
		if got := sc.cluster().CARotationPhase(); got != want {
			t.Fatalf("phase %s after the restarted manager's pass %d, want %s", got, pass+1, want)
		}
	}
}

// A start records the records the API server holds, also one the cache
// does not show yet (the first audit batch created it just before) or does
// not list (it lost its label): the gate would otherwise miss that record's
// deletion.
func TestAStartRecordsTheRecordsTheCacheDoesNotShow(t *testing.T) {
	record := func(name string, uid types.UID) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name, UID: uid}}
	}
	usage := record(credentials.CertificateUsageConfigMapName("prod"), "usage-uid")
	usage.Labels = map[string]string{v1alpha1.LabelCluster: "prod"}
	kubeconfigs := record(credentials.IssuedKubeconfigsConfigMapName("prod"), "kubeconfigs-uid")
	kubelets := record(credentials.KubeletCertificatesConfigMapName("prod"), "kubelets-uid")
	sc := newSettledCluster(t, usage, kubeconfigs, kubelets)
	sc.api.uncached = map[string]bool{usage.Name: true}
	sc.annotate(v1alpha1.OperationStartCARotation)
	sc.statusWritesUntil(v1alpha1.RotationPreparing)
	rot := sc.cluster().CARotation()
	if got := []types.UID{rot.UsageRecordUID, rot.KubeconfigRecordUID, rot.KubeletRecordUID}; !slices.Equal(got, []types.UID{usage.UID, kubeconfigs.UID, kubelets.UID}) {
		t.Errorf("the UIDs of the usage, kubeconfig and kubelet records: %q, want %q", got, []types.UID{usage.UID, kubeconfigs.UID, kubelets.UID})
	}

	// The next rotation judges by the records there when it starts.
	sc.statusWritesUntil(v1alpha1.RotationPrepared)
	sc.annotate(v1alpha1.OperationCompleteCARotation + v1alpha1.OperationForceSuffix)
	sc.statusWritesUntil(v1alpha1.RotationCompleted)
	if err := sc.api.apiServer.(client.Client).Delete(context.Background(), kubeconfigs); err != nil {
		t.Fatal(err)
	}
	sc.annotate(v1alpha1.OperationStartCARotation)
	sc.statusWritesUntil(v1alpha1.RotationPreparing)
	if got := sc.cluster().CARotation().KubeconfigRecordUID; got != "" {
		t.Errorf("the next rotation started with kubeconfigRecordUID %q, want none: the record was deleted before it started", got)
	}
}

func TestTrackRecord(t *testing.T) {
	name := credentials.IssuedKubeconfigsConfigMapName("prod")
	record := func(uid types.UID) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name, UID: uid}}
	}
	tests := []struct {
		name     string
		phase    v1alpha1.CARotationPhase
		kept     types.UID
		found    *corev1.ConfigMap
		wantLost bool
		wantKept types.UID
	}{
		{name: "the record the rotation started with", phase: v1alpha1.RotationPrepared, kept: "a", found: record("a"), wantKept: "a"},
		{name: "it is gone", phase: v1alpha1.RotationPrepared, kept: "a", wantLost: true, wantKept: "a"},
		{name: "it is another one", phase: v1alpha1.RotationPrepared, kept: "a", found: record("b"), wantLost: true, wantKept: "a"},
		{name: "it is another one, in an abort", phase: v1alpha1.RotationAborting, kept: "a", found: record("b"), wantLost: true, wantKept: "a"},
		{name: "none then, none now", phase: v1alpha1.RotationPrepared},
		{name: "none then, one created in Preparing", phase: v1alpha1.RotationPreparing, found: record("b"), wantKept: "b"},
		{name: "none then, one created while the workers wait", phase: v1alpha1.RotationWaitingForWorkersRollout, found: record("b"), wantKept: "b"},
		{name: "none then, one created in an abort", phase: v1alpha1.RotationAborting, found: record("b"), wantKept: "b"},
		{name: "none then, one created once Completed: nothing judges by it", phase: v1alpha1.RotationCompleted, found: record("b")},
		{name: "no rotation", found: record("b")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster("prod")
			if tt.phase != "" {
				setCARotation(c, &v1alpha1.CARotation{Phase: tt.phase, KubeconfigRecordUID: tt.kept})
			}
			before, rotBefore := c.DeepCopy(), c.CARotation()
			if lost := trackRecord(c, name, tt.found); lost != tt.wantLost {
				t.Errorf("lost = %v, want %v", lost, tt.wantLost)
			}
			if tt.phase == "" {
				if !equality.Semantic.DeepEqual(c, before) {
					t.Errorf("the Cluster without a rotation changed: %+v", c.Status)
				}
				return
			}
			if got := c.CARotation().KubeconfigRecordUID; got != tt.wantKept {
				t.Errorf("kubeconfigRecordUID = %q, want %q", got, tt.wantKept)
			}
			if tt.wantKept == tt.kept && c.CARotation() != rotBefore {
				t.Errorf("the rotation's status was replaced with nothing new to keep")
			}
		})
	}
}

// A kubeconfig record first created in Prepared becomes the one the
// rotation judges by: while it is there, also without its label (which
// hides it from the cache), the gate reads it; once it is deleted, the gate
// names the managed cluster, and an abort waits for the holders it can no
// longer tell until forced.
func TestAKubeconfigRecordLostDuringTheRotationIsNotForgotten(t *testing.T) {
	sc := newSettledCluster(t)
	sc.annotate(v1alpha1.OperationStartCARotation)
	sc.statusWritesUntil(v1alpha1.RotationPrepared)
	ctx, c := context.Background(), sc.cluster()
	cas := preparedClientCAs(t, sc)
	now := time.Now()
	kubeconfigs := &oldca.Kubeconfigs{Issued: []oldca.IssuedCertificate{{User: "carousel:admin:alice", Fingerprint: strings.Repeat("ab", sha256.Size),
		Issuer: hex.EncodeToString(cas.Previous.Cert.SubjectKeyId), IssuedAt: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}}}
	record := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.IssuedKubeconfigsConfigMapName(c.Name), UID: "kubeconfigs-uid",
		Labels: map[string]string{v1alpha1.LabelCluster: c.Name}}, Data: map[string]string{oldca.KubeconfigsDataKey: kubeconfigs.String()}}
	if err := sc.api.apiServer.(client.Client).Create(ctx, record); err != nil {
		t.Fatal(err)
	}
	dependents := func() []string {
		t.Helper()
		sc.reconcile()
		var got []string
		for _, d := range sc.cluster().CARotation().OldCAUsage.Dependents {
			got = append(got, string(d.Kind)+"/"+d.Name)
		}
		return got
	}
	alice := []string{"Kubeconfig/carousel:admin:alice"}
	if got := dependents(); !slices.Equal(got, alice) {
		t.Fatalf("dependents %v, want %v", got, alice)
	}
	if got := sc.cluster().CARotation().KubeconfigRecordUID; got != record.UID {
		t.Fatalf("kubeconfigRecordUID %q, want that of the record first seen in Prepared, %q", got, record.UID)
	}

	record.Labels = nil
	if err := sc.api.apiServer.(client.Client).Update(ctx, record); err != nil {
		t.Fatal(err)
	}
	if got := dependents(); !slices.Equal(got, alice) {
		t.Errorf("with the record unlabelled: dependents %v, want %v", got, alice)
	}

	if err := sc.api.apiServer.(client.Client).Delete(ctx, record); err != nil {
		t.Fatal(err)
	}
	if got := dependents(); !slices.Equal(got, []string{"Cluster/kubeconfigs"}) {
		t.Errorf("with the record deleted: dependents %v, want Cluster/kubeconfigs", got)
	}

	sc.annotate(v1alpha1.OperationAbortCARotation)
	c, cond := sc.rotationAfter(5)
	if c.CARotationPhase() != v1alpha1.RotationAborting || cond == nil || cond.Reason != string(v1alpha1.ReasonWaitingForKubeconfigHolders) ||
		!strings.Contains(cond.Message, "the record this rotation judges by, was deleted since") {
		t.Errorf("the abort is %s: %+v; want it Aborting, waiting for the holders of kubeconfigs the deleted record held", c.CARotationPhase(), cond)
	}
}

// A record the cache lists is kept as the one the rotation judges by in the
// first pass that sees it, in every phase of the rotation, not only where
// the gate or an abort reads it: one created and deleted in Preparing is
// not forgotten. One the cache still shows but the API server deleted is
// not kept: nothing could ever be that record again.
func TestRecordsFirstSeenInPreparingAreKept(t *testing.T) {
	c := newCluster("prod")
	setCARotation(c, &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing})
	usage := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.CertificateUsageConfigMapName(c.Name), UID: "usage-uid"}}
	deleted := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.IssuedKubeconfigsConfigMapName(c.Name), UID: "deleted-uid"}}
	r, _ := reconcilerOn(newFakeAPI(c, usage))
	s := &scope{cluster: c, objs: &objects{configMaps: map[string]*corev1.ConfigMap{usage.Name: usage, deleted.Name: deleted}}}
	if err := r.recordsPhase(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if rot := c.CARotation(); rot.UsageRecordUID != usage.UID || rot.KubeconfigRecordUID != "" {
		t.Errorf("usageRecordUID %q, kubeconfigRecordUID %q; want %q and none (the cache shows a record deleted since)",
			rot.UsageRecordUID, rot.KubeconfigRecordUID, usage.UID)
	}
}

// The gate reads the kubelet certificate record from the API server, keeps
// the first one it sees, and takes another one for lost.
func TestTheKubeletCertificateRecordIsTracked(t *testing.T) {
	c := newCluster("prod")
	setCARotation(c, &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared})
	record := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.KubeletCertificatesConfigMapName(c.Name), UID: "first"}}
	api := newFakeAPI(c, record)
	r, _ := reconcilerOn(api)
	ctx := context.Background()
	if _, unreadable, lost, err := r.kubeletCertificates(ctx, c); err != nil || unreadable || lost {
		t.Fatalf("the first record: unreadable %v, lost %v, %v", unreadable, lost, err)
	}
	if got := c.CARotation().KubeletRecordUID; got != record.UID {
		t.Fatalf("kubeletRecordUID %q, want the first record's %q", got, record.UID)
	}
	if err := api.apiServer.(client.Client).Delete(ctx, record); err != nil {
		t.Fatal(err)
	}
	if _, _, lost, err := r.kubeletCertificates(ctx, c); err != nil || !lost {
		t.Errorf("with the record deleted: lost %v, %v; want it lost", lost, err)
	}
	again := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: record.Name, UID: "again"}}
	if err := api.apiServer.(client.Client).Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	if _, _, lost, err := r.kubeletCertificates(ctx, c); err != nil || !lost {
		t.Errorf("with another record: lost %v, %v; want it lost", lost, err)
	}
}

// When the managed cluster's Nodes cannot be read, the gate keeps what they
// decided last: each stranded Node, and the kubelet record that judged the
// Nodes without a node agent, so that a restart before the managed cluster
// is connected does not open the gate on them.
func TestAFailedReadOfTheNodesKeepsTheirVerdict(t *testing.T) {
	last := &v1alpha1.OldCAUsage{Total: 5, Dependents: []v1alpha1.OldCADependent{
		{Kind: v1alpha1.OldCADependentCluster, Name: "kubelet-certificates", Message: "the record had no room for some"},
		{Kind: v1alpha1.OldCADependentNode, Name: "worker-1", Message: "its node agent reports another CA"},
		{Kind: v1alpha1.OldCADependentSecret, Name: "prod-operator", Message: "not from the new client CA"},
		{Kind: v1alpha1.OldCADependentUser, Name: "alice", Message: "seen with an old certificate"},
		{Kind: v1alpha1.OldCADependentCluster, Name: "kubeconfigs", Message: "the record does not parse"},
	}}
	var got []string
	for _, d := range oldca.Dependents(oldca.Facts{KeptNodes: keptNodes(last)}) {
		got = append(got, string(d.Kind)+"/"+d.Name)
	}
	if want := []string{"Cluster/kubelet-certificates", "Node/worker-1"}; !slices.Equal(got, want) {
		t.Errorf("dependents with the Nodes unread = %v, want %v", got, want)
	}
}

// The verdict of Nodes that cannot be read is kept for keptNodesLimit, then
// the gate says they cannot be read and holds: a Node that came back on an
// old-CA certificate meanwhile would not be seen. A read that works again
// starts the count over.
func TestNodesUnreadForLongHoldTheGate(t *testing.T) {
	sc, clk, readErr := preparedReadingNodes(t, "https://192.0.2.10:6443")
	nodesNamed := func() bool {
		u := sc.cluster().CARotation().OldCAUsage
		return u != nil && slices.ContainsFunc(u.Dependents, func(d v1alpha1.OldCADependent) bool {
			return d.Kind == v1alpha1.OldCADependentCluster && d.Name == "nodes"
		})
	}
	if u := sc.cluster().CARotation().OldCAUsage; u == nil || u.Total != 0 {
		t.Fatalf("old-CA usage with every Node read: %+v, want none", u)
	}

	*readErr = errors.New("connection refused")
	for _, step := range []time.Duration{0, keptNodesLimit - time.Second} {
		clk.Step(step)
		sc.reconcile()
		if nodesNamed() {
			t.Fatalf("%s into the failed reads: the Nodes named, want their last verdict kept", step)
		}
	}
	clk.Step(time.Second)
	sc.reconcile()
	if !nodesNamed() {
		t.Fatalf("%s into the failed reads: old-CA usage %+v, want the Nodes named unreadable", keptNodesLimit, sc.cluster().CARotation().OldCAUsage)
	}

	*readErr = nil
	sc.reconcile()
	*readErr = errors.New("connection refused")
	clk.Step(keptNodesLimit - time.Second)
	sc.reconcile()
	if nodesNamed() {
		t.Fatal("after a read that worked, the failed reads are counted from the next one")
	}
}

// A completion waits for the old-CA usage gate to read the Nodes when what
// the last verdict said of them, which names no one, is no read of this
// process: after a restart (the connection to the managed cluster not up
// yet; a Node back on an old-CA certificate meanwhile would not be in it),
// or when the endpoint was set in Prepared. Its passes look again as the
// gate's reads of the Nodes do, not every second, and the maintenance window
// says what it waits for. It goes ahead once a pass has read them, and is
// refused once the gate names them unreadable (keptNodesLimit).
func TestACompletionWaitsForTheNodesToBeRead(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		restart, endpointLate bool
		annotation            string
		readAgain             bool
	}{
		{name: "after a restart", restart: true, annotation: v1alpha1.OperationAnnotation, readAgain: true},
		{name: "queued for the window, after a restart", restart: true, annotation: v1alpha1.MaintenanceOperationAnnotation, readAgain: true},
		{name: "the endpoint set in Prepared", endpointLate: true, annotation: v1alpha1.OperationAnnotation, readAgain: true},
		{name: "the Nodes never read after a restart", restart: true, annotation: v1alpha1.OperationAnnotation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const endpoint = "https://192.0.2.10:6443"
			endpointAtStart := endpoint
			if tc.endpointLate {
				endpointAtStart = ""
			}
			sc, clk, readErr := preparedReadingNodes(t, endpointAtStart)
			sc.reconcile()
			if u := sc.cluster().CARotation().OldCAUsage; u == nil || u.Total != 0 {
				t.Fatalf("old-CA usage in Prepared: %+v, want none", u)
			}

			r := sc.r
			if tc.restart {
				r, _ = reconcilerOn(sc.api)
				r.Recommendations, r.Clock, r.ManagedNodes = sc.r.Recommendations, clk, sc.r.ManagedNodes
			}
			r.ManagedPollInterval = 5 * time.Second
			*readErr = errors.New("not connected")
			c := sc.cluster()
			if tc.endpointLate {
				c.Spec.ControlPlane.Endpoint = endpoint
			}
			metav1.SetMetaDataAnnotation(&c.ObjectMeta, tc.annotation, v1alpha1.OperationCompleteCARotation)
			now := clk.Now().UTC()
			c.Spec.Maintenance = &v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{
				Begin: now.Add(-time.Hour).Format("150405-0700"), End: now.Add(time.Hour).Format("150405-0700")}}
			if err := sc.api.Update(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			pass := func() ctrl.Result {
				t.Helper()
				result, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: sc.key})
				if err != nil {
					t.Fatal(err)
				}
				return result
			}
			for i := range 5 {
				result := pass()
				c := sc.cluster()
				if c.CARotationPhase() != v1alpha1.RotationPrepared || c.Annotations[tc.annotation] != v1alpha1.OperationCompleteCARotation {
					t.Fatalf("pass %d, the Nodes unread: phase %s, annotations %v; want the completion waiting in Prepared", i+1, c.CARotationPhase(), c.Annotations)
				}
				if i > 0 && result.RequeueAfter <= time.Second {
					t.Fatalf("pass %d, the Nodes unread: looks again after %s, want as the gate's reads of them do", i+1, result.RequeueAfter)
				}
				if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionMaintenanceOperationQueued); i > 0 &&
					tc.annotation == v1alpha1.MaintenanceOperationAnnotation && (cond == nil || !strings.Contains(cond.Message, "has not read the managed cluster's Nodes")) {
					t.Fatalf("pass %d: MaintenanceOperationQueued %+v, want it waiting for the Nodes", i+1, cond)
				}
				clk.Step(result.RequeueAfter)
			}
			if !tc.readAgain {
				clk.Step(keptNodesLimit)
				pass()
				pass()
				if c := sc.cluster(); c.CARotationPhase() != v1alpha1.RotationPrepared || c.Annotations[tc.annotation] != "" {
					t.Fatalf("past keptNodesLimit, the Nodes unread: phase %s, annotations %v; want the completion refused in Prepared", c.CARotationPhase(), c.Annotations)
				}
				return
			}
			*readErr = nil
			for range 3 {
				pass()
			}
			if got := sc.cluster().CARotationPhase(); got != v1alpha1.RotationFinalizing && got != v1alpha1.RotationCompleted {
				t.Fatalf("phase %s once the Nodes were read, want the completion under way", got)
			}
		})
	}
}

// preparedReadingNodes is a settled Cluster with endpoint (none when empty)
// taken to Prepared on a fake clock, whose reconciler reads no Nodes, or
// fails with *readErr when it is set.
func preparedReadingNodes(t *testing.T, endpoint string) (sc *settledCluster, clk *clocktesting.FakeClock, readErr *error) {
	t.Helper()
	sc = newSettledCluster(t)
	if endpoint != "" {
		sc.setEndpoint(endpoint)
	}
	clk = clocktesting.NewFakeClock(time.Now())
	sc.r.Clock = clk
	readErr = new(error)
	sc.r.ManagedNodes = func(context.Context, *v1alpha1.Cluster) ([]corev1.Node, []coordinationv1.Lease, error) {
		return nil, nil, *readErr
	}
	sc.annotate(v1alpha1.OperationStartCARotation)
	sc.statusWritesUntil(v1alpha1.RotationPrepared)
	return sc, clk, readErr
}

// While the Nodes cannot be read, the gate's reads of them back off as the
// managed checks do, counted from the first failed read, and look again at
// the poll interval once a read works: no check of the Prepared phase starts
// the managed checks' failing run.
func TestTheGatesNodeReadsBackOffWhileTheyFail(t *testing.T) {
	sc := newSettledCluster(t)
	sc.setEndpoint("https://192.0.2.10:6443")
	clk := clocktesting.NewFakeClock(time.Now())
	sc.r.Clock = clk
	sc.r.ManagedPollInterval = 5 * time.Second
	worker := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1", Annotations: map[string]string{ // its agent reports another CA
		v1alpha1.AnnotationNodeAgent: "", v1alpha1.AnnotationClientCertificateIssuer: "0a0b0c",
	}}}
	var readErr error
	sc.r.ManagedNodes = func(context.Context, *v1alpha1.Cluster) ([]corev1.Node, []coordinationv1.Lease, error) {
		if readErr != nil {
			return nil, nil, readErr
		}
		return []corev1.Node{worker}, nil, nil
	}
	sc.annotate(v1alpha1.OperationStartCARotation)
	sc.statusWritesUntil(v1alpha1.RotationPrepared)
	lookAgainAfter := func() time.Duration {
		t.Helper()
		res, err := sc.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: sc.key})
		if err != nil {
			t.Fatal(err)
		}
		return res.RequeueAfter
	}
	if got := lookAgainAfter(); got != 5*time.Second {
		t.Fatalf("with a Node holding the gate, looked again after %s, want the poll interval", got)
	}
	readErr = errors.New("connection refused")
	for _, step := range []struct {
		after, want time.Duration
	}{
		{0, 5 * time.Second},
		{time.Minute, 15 * time.Second},
		{time.Hour, DefaultMaxManagedPollInterval},
	} {
		clk.Step(step.after)
		if got := lookAgainAfter(); got != step.want {
			t.Errorf("%s into the failed reads: looked again after %s, want %s", step.after, got, step.want)
		}
	}
	readErr = nil
	if got := lookAgainAfter(); got != 5*time.Second {
		t.Errorf("once the Nodes were read again: looked again after %s, want the poll interval", got)
	}

	// Reads failing when the rotation left Prepared do not back off the
	// next rotation's first failed read.
	readErr = errors.New("connection refused")
	lookAgainAfter()
	clk.Step(time.Hour)
	sc.annotate(v1alpha1.OperationCompleteCARotation + v1alpha1.OperationForceSuffix)
	sc.statusWritesUntil(v1alpha1.RotationCompleted)
	sc.annotate(v1alpha1.OperationStartCARotation)
	sc.statusWritesUntil(v1alpha1.RotationPrepared)
	if got := lookAgainAfter(); got != 5*time.Second {
		t.Errorf("the next rotation's first failed read: looked again after %s, want the poll interval", got)
	}
}

// A Prepared rotation whose endpoint was removed from the spec cannot read
// the Nodes: the gate says so, and does not open on the Nodes it cannot see.
func TestTheOldCAUsageGateHoldsWhileTheRotationsEndpointIsRemoved(t *testing.T) {
	sc := newSettledCluster(t)
	sc.annotate(v1alpha1.OperationStartCARotation)
	sc.statusWritesUntil(v1alpha1.RotationPrepared)
	c := sc.cluster()
	if u := c.CARotation().OldCAUsage; u == nil || u.Total != 0 {
		t.Fatalf("old-CA usage of a Prepared rotation without an endpoint: %+v, want none", u)
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionOldCAsUnused); cond == nil ||
		!strings.Contains(cond.Message, "(the Cluster has no endpoint: only Carousel's certificates and records were checked)") {
		t.Errorf("%s without an endpoint: %+v, want it to say what was checked: no Nodes", v1alpha1.ConditionOldCAsUnused, cond)
	}
	c.Status.Credentials.Rotation.CertificateAuthorities.CheckedEndpoint = "https://prod.example:6443" // checked, then removed from the spec
	if err := sc.api.Status().Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	sc.reconcile()
	u := sc.cluster().CARotation().OldCAUsage
	if u == nil || u.Total != 1 || u.Dependents[0].Kind != v1alpha1.OldCADependentCluster || u.Dependents[0].Name != "nodes" {
		t.Fatalf("old-CA usage once the rotation's endpoint was removed: %+v, want the Nodes named unreadable", u)
	}
}

// A pass that cannot read the audit webhook's CA bundle (the chart mounts it
// from a Secret the manager creates once it runs, which the kubelet fills a
// minute or so later) looks again a minute later, and writes the Cluster's
// audit-webhook Secret once it can: nothing else brought an idle Cluster
// back before its next renewal, months on. One unreadable for long is looked
// at later and later (every Cluster of a fleet each minute, for good, with a
// mount misconfigured).
func TestAnUnreadableAuditWebhookBundleIsReadAgainInAMinute(t *testing.T) {
	sc := newSettledCluster(t)
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	sc.r.Clock = clk
	bundle := pkitest.NewCA(t, "audit webhook CA").CertPEM()
	var mounted bool
	sc.r.AuditWebhook = &AuditWebhook{URL: "https://carousel-webhook.carousel-system.svc:443/audit", CABundle: func() ([]byte, error) {
		if !mounted {
			return nil, errors.New("open /var/run/carousel/audit-webhook/ca.crt: no such file or directory")
		}
		return bundle, nil
	}}
	secret := client.ObjectKey{Namespace: sc.key.Namespace, Name: credentials.AuditWebhookSecretName(sc.key.Name)}
	result, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key})
	if err != nil || result.RequeueAfter <= 0 || result.RequeueAfter > auditWebhookBundleRetry {
		t.Fatalf("a pass without the bundle: %+v, %v; want it looked at again within %s", result, err, auditWebhookBundleRetry)
	}
	if err := sc.api.Get(ctx, secret, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the audit-webhook Secret without a bundle: %v, want none", err)
	}
	clk.Step(5 * time.Hour)
	if result, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key}); err != nil || result.RequeueAfter != time.Hour {
		t.Fatalf("a pass without the bundle for five hours: %+v, %v; want it looked at again an hour later, at most", result, err)
	}
	mounted = true
	sc.reconcile()
	if err := sc.api.Get(ctx, secret, &corev1.Secret{}); err != nil {
		t.Errorf("the audit-webhook Secret once the bundle is there: %v", err)
	}
}

// An abort keeps the new client CA while a Node's kubelet holds a client
// certificate Carousel signed from it (one outside the worker pools the
// abort rolls): it waits, naming the Node, and goes on once the kubelet
// renewed from the old client CA. A Node deleted since does not hold it.
func TestAnAbortWaitsForTheKubeletsOnTheNewClientCA(t *testing.T) {
	sc := newSettledCluster(t)
	h := prepareKubeletHolders(t, sc, []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "worker-2"}}, {ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}}},
		map[string]bool{"worker-1": true, "worker-2": false, "gone": true})

	sc.annotate(v1alpha1.OperationAbortCARotation)
	c, cond := sc.rotationAfter(5)
	if c.CARotationPhase() != v1alpha1.RotationAborting || c.CARotation().AbortRolledBackTime != nil || cond == nil ||
		cond.Reason != string(v1alpha1.ReasonWaitingForKubeletHolders) || !strings.Contains(cond.Message, "1 Node(s) whose kubelet holds") ||
		!strings.Contains(cond.Message, ": worker-1;") {
		t.Fatalf("the abort is %s: %+v; want it Aborting, waiting for worker-1's kubelet alone", c.CARotationPhase(), cond)
	}
	sc.setEndpoint("")
	if c, cond = sc.rotationAfter(3); c.CARotation().AbortRolledBackTime != nil || cond == nil ||
		cond.Reason != string(v1alpha1.ReasonWaitingForKubeletHolders) || !strings.Contains(cond.Message, "endpoint was removed") ||
		!strings.Contains(cond.Message, ": Node(s) Carousel cannot name whose kubelet") {
		t.Fatalf("with the endpoint removed the abort is %s: %+v; want it waiting, as the Nodes cannot be read", c.CARotationPhase(), cond)
	}
	sc.setEndpoint("https://192.0.2.10:6443")
	sc.rotationAfter(3)

	h.store(t, sc, h.signed("worker-1", h.oldCA, "b1"))
	if c, cond := sc.rotationAfter(5); c.CARotation().AbortRolledBackTime == nil {
		t.Errorf("with worker-1 renewed from the old client CA the abort is %s, %+v; want everything recorded back on the old CAs", c.CARotationPhase(), cond)
	}
}

// An abort keeps the new kubelet CA while a Node's kubelet serves a
// certificate Carousel signed from it (renewed by the kubelet itself in
// Preparing, outside the pools the abort rolls): the API server, trusting
// the old kubelet CA alone once it is deleted, would no longer verify that
// kubelet (logs, exec). It waits, naming the Node, and goes on once the
// kubelet serves a certificate from the old kubelet CA.
func TestAnAbortWaitsForTheKubeletsServingFromTheNewKubeletCA(t *testing.T) {
	sc := newSettledCluster(t)
	h := prepareKubeletHolders(t, sc, []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}}, {ObjectMeta: metav1.ObjectMeta{Name: "worker-2"}}},
		map[string]bool{"worker-1": false, "worker-2": false})
	kubeletCAs := preparedCAs(t, sc, v1alpha1.CARoleKubelet)
	newKubeletCA, oldKubeletCA := hex.EncodeToString(kubeletCAs.Current.Cert.SubjectKeyId), hex.EncodeToString(kubeletCAs.Previous.Cert.SubjectKeyId)
	serving := func(node, issuer, fingerprint string) oldca.IssuedCertificate {
		cert := h.signed(node, issuer, fingerprint)
		cert.Serving = true
		return cert
	}
	h.store(t, sc, serving("worker-1", newKubeletCA, "c1"), serving("worker-2", newKubeletCA, "c2"), serving("worker-2", oldKubeletCA, "c3"))

	sc.annotate(v1alpha1.OperationAbortCARotation)
	c, cond := sc.rotationAfter(5)
	if c.CARotationPhase() != v1alpha1.RotationAborting || c.CARotation().AbortRolledBackTime != nil || cond == nil ||
		cond.Reason != string(v1alpha1.ReasonWaitingForKubeletHolders) || !strings.Contains(cond.Message, "would no longer verify): worker-1;") {
		t.Fatalf("the abort is %s: %+v; want it Aborting, waiting for worker-1's kubelet alone", c.CARotationPhase(), cond)
	}
	// A record that had no room for some serving certificates cannot tell:
	// it is named, and so are the holders it tells of.
	until := h.now.Add(time.Hour)
	h.kubelets.UnrecordedServingUntil = &until
	waitsFor := func(want ...string) {
		t.Helper()
		_, cond := sc.rotationAfter(5)
		if cond == nil || cond.Reason != string(v1alpha1.ReasonWaitingForKubeletHolders) {
			t.Fatalf("with serving certificates the record forgot: %+v; want the abort waiting", cond)
		}
		for _, w := range want {
			if !strings.Contains(cond.Message, w) {
				t.Errorf("the abort waits: %q; want it to name %q", cond.Message, w)
			}
		}
	}
	h.store(t, sc)
	waitsFor("1 Node(s), and others Carousel cannot name, whose kubelet", "had no room for some kubelet serving certificates", "worker-1")
	h.store(t, sc, serving("worker-1", oldKubeletCA, "c4"))
	waitsFor("Node(s) Carousel cannot name whose kubelet", "had no room for some kubelet serving certificates")
	h.kubelets.UnrecordedServingUntil = nil
	h.store(t, sc)
	if c, cond := sc.rotationAfter(5); c.CARotation().AbortRolledBackTime == nil {
		t.Errorf("with worker-1 serving from the old kubelet CA the abort is %s, %+v; want everything recorded back on the old CAs", c.CARotationPhase(), cond)
	}
}

// kubeletHolders is a Prepared rotation whose kubelet record says which
// Nodes' kubelets hold a client certificate from the new client CA.
type kubeletHolders struct {
	signed       func(node, issuer, fingerprint string) oldca.IssuedCertificate
	kubelets     *oldca.KubeletCertificates
	record       *corev1.ConfigMap
	newCA, oldCA string
	now          time.Time
}

// prepareKubeletHolders gives sc's Cluster an endpoint whose managed cluster
// has nodes, prepares a rotation, and records a client certificate for each
// node of onNewCA (true: from the new client CA, false: from the old one).
func prepareKubeletHolders(t *testing.T, sc *settledCluster, nodes []corev1.Node, onNewCA map[string]bool) kubeletHolders {
	t.Helper()
	ctx, c := context.Background(), sc.cluster()
	sc.setEndpoint("https://192.0.2.10:6443")
	sc.r.ManagedNodes = func(context.Context, *v1alpha1.Cluster) ([]corev1.Node, []coordinationv1.Lease, error) {
		return nodes, nil, nil
	}
	sc.annotate(v1alpha1.OperationStartCARotation)
	sc.statusWritesUntil(v1alpha1.RotationPrepared)
	cas := preparedClientCAs(t, sc)
	h := kubeletHolders{newCA: hex.EncodeToString(cas.Current.Cert.SubjectKeyId), oldCA: hex.EncodeToString(cas.Previous.Cert.SubjectKeyId),
		now: time.Now(), kubelets: &oldca.KubeletCertificates{}}
	h.signed = func(node, issuer, fingerprint string) oldca.IssuedCertificate {
		return oldca.IssuedCertificate{User: "system:node:" + node, Fingerprint: strings.Repeat(fingerprint, sha256.Size), Issuer: issuer,
			IssuedAt: h.now.Add(-time.Minute), NotAfter: h.now.Add(time.Hour)}
	}
	var certs []oldca.IssuedCertificate
	for i, node := range slices.Sorted(maps.Keys(onNewCA)) {
		issuer := h.oldCA
		if onNewCA[node] {
			issuer = h.newCA
		}
		certs = append(certs, h.signed(node, issuer, fmt.Sprintf("a%d", i)))
	}
	h.kubelets.Add(certs, h.now)
	h.record = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.KubeletCertificatesConfigMapName(c.Name)},
		Data: map[string]string{}, BinaryData: map[string][]byte{}}
	oldca.StoreKubeletCertificates(h.kubelets.String(), h.record.Data, h.record.BinaryData)
	if err := sc.api.apiServer.(client.Client).Create(ctx, h.record); err != nil {
		t.Fatal(err)
	}
	return h
}

// store adds certs to the kubelet record, as the kubelet CSR signer does.
func (h kubeletHolders) store(t *testing.T, sc *settledCluster, certs ...oldca.IssuedCertificate) {
	t.Helper()
	ctx := context.Background()
	if err := sc.api.apiServer.(client.Client).Get(ctx, client.ObjectKeyFromObject(h.record), h.record); err != nil {
		t.Fatal(err)
	}
	h.kubelets.Add(certs, h.now)
	oldca.StoreKubeletCertificates(h.kubelets.String(), h.record.Data, h.record.BinaryData)
	if err := sc.api.apiServer.(client.Client).Update(ctx, h.record); err != nil {
		t.Fatal(err)
	}
}

// preparedClientCAs are the client CAs of sc's Cluster, whose rotation is
// Prepared: the new one current, the old one previous.
func preparedClientCAs(t *testing.T, sc *settledCluster) *credentials.CAs {
	t.Helper()
	return preparedCAs(t, sc, v1alpha1.CARoleClient)
}

// preparedCAs are the CAs of role of sc's Cluster, whose rotation is
// Prepared: the new one current, the old one previous.
func preparedCAs(t *testing.T, sc *settledCluster, role v1alpha1.CARole) *credentials.CAs {
	t.Helper()
	c := sc.cluster()
	secret := &corev1.Secret{}
	if err := sc.api.Get(context.Background(), client.ObjectKey{Namespace: c.Namespace, Name: credentials.CASecretName(c.Name, role)}, secret); err != nil {
		t.Fatal(err)
	}
	cas, err := credentials.DecodeCASecret(secret)
	if err != nil || cas.Previous == nil {
		t.Fatalf("the %s CAs of a Prepared rotation: %v, %v", role, cas, err)
	}
	return cas
}

// An abort waiting for kubelet holders asks those in a pool whose rollout
// can ask its nodes again (InPlace) to renew, through that rollout, every
// pass while they hold: a node offline while the abort rolled its pool is
// not asked when it comes back. A holder outside such a pool is not asked.
func TestAnAbortAsksTheKubeletHoldersOfInPlacePools(t *testing.T) {
	sc := newSettledCluster(t)
	ctx, c := context.Background(), sc.cluster()
	c.Spec.Workers = []v1alpha1.WorkerPool{{Name: "pool-a", RolloutStrategy: v1alpha1.RolloutInPlace}}
	if err := sc.api.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	asker := &askingRollout{}
	sc.r.WorkerRollouts = map[v1alpha1.WorkerRolloutStrategy]WorkerRollout{v1alpha1.RolloutInPlace: asker}
	inPool := func(name, pool string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelPool: pool}}}
	}
	prepareKubeletHolders(t, sc, []corev1.Node{inPool("worker-1", "pool-a"), inPool("worker-2", "pool-a"), inPool("autoscaled-1", "")},
		map[string]bool{"worker-1": true, "worker-2": false, "autoscaled-1": true})
	if len(asker.asked) != 0 {
		t.Fatalf("nodes asked before the abort: %v", asker.asked)
	}

	sc.annotate(v1alpha1.OperationAbortCARotation)
	if _, cond := sc.rotationAfter(5); cond == nil || cond.Reason != string(v1alpha1.ReasonWaitingForKubeletHolders) {
		t.Fatalf("the abort: %+v, want it waiting for the kubelet holders", cond)
	}
	if len(asker.asked) == 0 || slices.ContainsFunc(asker.asked, func(nodes []string) bool { return !slices.Equal(nodes, []string{"worker-1"}) }) {
		t.Errorf("asked %v, want worker-1 alone, each pass it holds", asker.asked)
	}
	// A node that cannot be asked (an admission policy refuses the patch)
	// fails no pass: the status still says what the abort waits for.
	asker.err = errors.New(`nodes "worker-1" is forbidden: refused by policy`)
	sc.reconcile()
}

// askingRollout rolls a pool at once and records the nodes it is asked to
// ask again, failing with err.
type askingRollout struct {
	asked [][]string
	err   error
}

func (*askingRollout) Rollout(context.Context, *v1alpha1.Cluster, v1alpha1.WorkerPool) (bool, string, error) {
	return true, "", nil
}

func (a *askingRollout) AskNodes(_ context.Context, _ *v1alpha1.Cluster, nodes []corev1.Node) ([]string, error) {
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	a.asked = append(a.asked, names)
	return names, a.err
}
