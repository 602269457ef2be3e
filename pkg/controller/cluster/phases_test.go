package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// rotatingCluster is a Cluster without an endpoint (so no check of a
// managed cluster is due) on an in-memory API server, with its credentials
// issued and its status settled.
type rotatingCluster struct {
	t   *testing.T
	api *fakeAPI
	r   *Reconciler
	key client.ObjectKey
}

func newRotatingCluster(t *testing.T) *rotatingCluster {
	c := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "fleet", UID: "prod-uid"},
		Spec:       v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"},
	}
	api := newFakeAPI(c)
	rc := &rotatingCluster{t: t, api: api, key: client.ObjectKeyFromObject(c),
		r: &Reconciler{Client: api, Clock: clock.RealClock{}, Recorder: events.NewFakeRecorder(1000), indexedByCluster: true,
			Recommendations: rotation.RecommendationPolicy{RotationInterval: 90 * 24 * time.Hour, PreparedWarning: 7 * 24 * time.Hour}}}
	for range 3 { // the first pass issues everything, the next ones settle the status
		rc.reconcile()
	}
	return rc
}

func (rc *rotatingCluster) reconcile() {
	rc.t.Helper()
	if _, err := rc.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: rc.key}); err != nil {
		rc.t.Fatal(err)
	}
}

func (rc *rotatingCluster) cluster() *v1alpha1.Cluster {
	rc.t.Helper()
	c := &v1alpha1.Cluster{}
	if err := rc.api.Get(context.Background(), rc.key, c); err != nil {
		rc.t.Fatal(err)
	}
	return c
}

func (rc *rotatingCluster) annotate(operation string) {
	rc.t.Helper()
	c := rc.cluster()
	metav1.SetMetaDataAnnotation(&c.ObjectMeta, v1alpha1.OperationAnnotation, operation)
	if err := rc.api.Update(context.Background(), c); err != nil {
		rc.t.Fatal(err)
	}
}

// passesUntil reconciles until the Cluster is in phase want, and returns
// how many passes and status writes that took; it fails the test after ten.
func (rc *rotatingCluster) passesUntil(want v1alpha1.CARotationPhase) (passes int, statusPatches int64) {
	rc.t.Helper()
	before := rc.api.statusPatches.Load()
	for passes = 1; passes <= 10; passes++ {
		rc.reconcile()
		if rc.cluster().CARotationPhase() == want {
			return passes, rc.api.statusPatches.Load() - before
		}
	}
	rc.t.Fatalf("phase %s after 10 passes, want %s", rc.cluster().CARotationPhase(), want)
	return 0, 0
}

// bundleSizes is how many CAs each role's bundle ConfigMap holds.
func (rc *rotatingCluster) bundleSizes() map[v1alpha1.CARole]int {
	rc.t.Helper()
	sizes := map[v1alpha1.CARole]int{}
	for _, role := range v1alpha1.CARoles() {
		cm := &corev1.ConfigMap{}
		key := client.ObjectKey{Namespace: rc.key.Namespace, Name: credentials.BundleConfigMapName(rc.key.Name, role)}
		if err := rc.api.Get(context.Background(), key, cm); err != nil {
			rc.t.Fatal(err)
		}
		sizes[role] = strings.Count(cm.Data[v1alpha1.DataKeyCABundle], "BEGIN CERTIFICATE")
	}
	return sizes
}

// The pass that drops the old CAs goes on to write the bundles without them
// and to decide the phase, so that a Cluster with nothing else to wait for
// is Completed one pass and one status write after the operation is taken
// up, not two of each.
func TestFinalizingCompletesInThePassThatDropsTheOldCAs(t *testing.T) {
	rc := newRotatingCluster(t)
	rc.annotate(v1alpha1.OperationStartCARotation)
	rc.passesUntil(v1alpha1.RotationPrepared)
	for role, n := range rc.bundleSizes() {
		if n != 2 {
			t.Fatalf("Prepared: the %s bundle holds %d CAs, want the old and the new", role, n)
		}
	}

	rc.annotate(v1alpha1.OperationCompleteCARotation)
	if passes, patches := rc.passesUntil(v1alpha1.RotationFinalizing); passes != 1 || patches != 1 {
		t.Fatalf("the complete operation was taken up after %d passes and %d status writes, want 1 and 1", passes, patches)
	}
	if passes, patches := rc.passesUntil(v1alpha1.RotationCompleted); passes != 1 || patches != 1 {
		t.Errorf("Completed %d passes and %d status writes after Finalizing, want 1 and 1", passes, patches)
	}
	for role, n := range rc.bundleSizes() {
		if n != 1 {
			t.Errorf("Completed: the %s bundle holds %d CAs, want the new one alone", role, n)
		}
	}
	writes := rc.api.writes.Load()
	rc.reconcile()
	if got := rc.api.writes.Load() - writes; got != 0 {
		t.Errorf("a pass after Completed made %d writes, want none", got)
	}
}

// An abort drops the new CAs the same way, once a pass has persisted that
// the rollback is done (the status write comes before the drop, so that a
// crash between them loses nothing): the pass that drops them decides
// Aborted.
func TestAbortingEndsInThePassThatDropsTheNewCAs(t *testing.T) {
	rc := newRotatingCluster(t)
	rc.annotate(v1alpha1.OperationStartCARotation)
	rc.passesUntil(v1alpha1.RotationPrepared)

	rc.annotate(v1alpha1.OperationAbortCARotation)
	if passes, patches := rc.passesUntil(v1alpha1.RotationAborting); passes != 1 || patches != 1 {
		t.Fatalf("the abort was taken up after %d passes and %d status writes, want 1 and 1", passes, patches)
	}
	patches := rc.api.statusPatches.Load()
	rc.reconcile()
	if rot := rc.cluster().CARotation(); rot.AbortRolledBackTime == nil || rot.Phase != v1alpha1.RotationAborting {
		t.Fatalf("after a pass in Aborting: phase %s, rollback recorded at %v; want Aborting with the rollback recorded", rot.Phase, rot.AbortRolledBackTime)
	}
	for role, n := range rc.bundleSizes() {
		if n != 2 {
			t.Fatalf("the pass that records the rollback left the %s bundle with %d CAs, want both until the next pass", role, n)
		}
	}
	rc.reconcile()
	if phase := rc.cluster().CARotationPhase(); phase != v1alpha1.RotationAborted {
		t.Errorf("phase %s after the pass that drops the new CAs, want Aborted", phase)
	}
	if got := rc.api.statusPatches.Load() - patches; got != 2 {
		t.Errorf("%d status writes from Aborting to Aborted, want 2", got)
	}
	for role, n := range rc.bundleSizes() {
		if n != 1 {
			t.Errorf("Aborted: the %s bundle holds %d CAs, want the old one alone", role, n)
		}
	}
}
