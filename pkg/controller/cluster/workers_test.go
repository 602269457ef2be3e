package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// rolledWithout is a WorkerRollout that finds every pool rolled without the
// offline node it names.
type rolledWithout map[string]string

func (r rolledWithout) Rollout(_ context.Context, _ *v1alpha1.Cluster, pool v1alpha1.WorkerPool) (bool, string, error) {
	return true, "pool " + pool.Name + ": rolled without " + r[pool.Name], nil
}

// failing is a WorkerRollout that fails for the pools it names and finds the
// others rolled.
type failing map[string]error

func (f failing) Rollout(_ context.Context, _ *v1alpha1.Cluster, pool v1alpha1.WorkerPool) (bool, string, error) {
	err := f[pool.Name]
	return err == nil, "", err
}

// TestAPoolThatFailsHoldsUpNoOtherPool: the pools after one whose rollout
// fails are rolled in the same pass, and those done leave
// pendingWorkersRollouts; the failure is returned.
func TestAPoolThatFailsHoldsUpNoOtherPool(t *testing.T) {
	c := &v1alpha1.Cluster{Spec: v1alpha1.ClusterSpec{Workers: []v1alpha1.WorkerPool{
		{Name: "pool-a", RolloutStrategy: v1alpha1.RolloutInPlace}, {Name: "pool-b", RolloutStrategy: v1alpha1.RolloutInPlace}}}}
	c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{
		Phase: v1alpha1.RotationPreparing, PendingWorkersRollouts: []v1alpha1.PendingWorkersRollout{{Name: "pool-a"}, {Name: "pool-b"}}}}}
	refused := errors.New("nodes \"a-1\" is forbidden: a policy refuses annotations")
	r := &Reconciler{Recorder: events.NewFakeRecorder(10),
		WorkerRollouts: map[v1alpha1.WorkerRolloutStrategy]WorkerRollout{v1alpha1.RolloutInPlace: failing{"pool-a": refused}}}

	_, err := r.rollWorkers(context.Background(), c)
	if !errors.Is(err, refused) || !strings.Contains(err.Error(), "rolling worker pool pool-a") {
		t.Fatalf("rollWorkers error %v, want pool-a's", err)
	}
	if pending := pendingPools(c); len(pending) != 1 || pending[0].Name != "pool-a" {
		t.Errorf("pools %v still pending, want pool-a alone: pool-b rolled", pending)
	}
}

// TestOneEventNamesEveryPoolRolledWithoutOfflineNodes: pools finished in one
// reconcile without their offline nodes are one event naming them all, as the
// events library folds a second event of the same reason about the same
// Cluster version into the first one's series, note and all.
func TestOneEventNamesEveryPoolRolledWithoutOfflineNodes(t *testing.T) {
	offline := rolledWithout{"pool-a": "node-a", "pool-b": "node-b"}
	c := &v1alpha1.Cluster{Spec: v1alpha1.ClusterSpec{Workers: []v1alpha1.WorkerPool{
		{Name: "pool-a", RolloutStrategy: v1alpha1.RolloutInPlace}, {Name: "pool-b", RolloutStrategy: v1alpha1.RolloutInPlace}}}}
	c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{
		Phase: v1alpha1.RotationPreparing, PendingWorkersRollouts: []v1alpha1.PendingWorkersRollout{{Name: "pool-a"}, {Name: "pool-b"}}}}}
	recorder := events.NewFakeRecorder(10)
	r := &Reconciler{Recorder: recorder, WorkerRollouts: map[v1alpha1.WorkerRolloutStrategy]WorkerRollout{v1alpha1.RolloutInPlace: offline}}

	waiting, err := r.rollWorkers(context.Background(), c)
	if err != nil || len(waiting) != 0 {
		t.Fatalf("rollWorkers = %q, %v; want every pool rolled", waiting, err)
	}
	if pending := pendingPools(c); len(pending) != 0 {
		t.Errorf("pools %v still pending", pending)
	}
	var got []string
	for len(recorder.Events) > 0 {
		got = append(got, <-recorder.Events)
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], corev1.EventTypeWarning+" "+v1alpha1.EventWorkerPoolRolledWithoutOfflineNodes+" ") {
		t.Fatalf("events %q, want one %s", got, v1alpha1.EventWorkerPoolRolledWithoutOfflineNodes)
	}
	for _, node := range offline {
		if !strings.Contains(got[0], node) {
			t.Errorf("event %q does not name %s", got[0], node)
		}
	}
}

func TestEventNoteFitsAnEvent(t *testing.T) {
	for _, tc := range []struct {
		name, note string
		cut        bool
	}{
		{"short", "pool a: rolled", false},
		{"at the limit", strings.Repeat("a", maxEventNote), false},
		{"one byte over", strings.Repeat("a", maxEventNote+1), true},
		{"a character across the limit", strings.Repeat("a", maxEventNote-4) + strings.Repeat("é", 10), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := eventNote(tc.note)
			if len(got) > maxEventNote || !utf8.ValidString(got) {
				t.Fatalf("eventNote is %d bytes (valid UTF-8: %t), want at most %d", len(got), utf8.ValidString(got), maxEventNote)
			}
			if cut := got != tc.note; cut != tc.cut {
				t.Fatalf("cut = %t, want %t", cut, tc.cut)
			}
			if tc.cut && (!strings.HasSuffix(got, "…") || !strings.HasPrefix(tc.note, strings.TrimSuffix(got, "…"))) {
				t.Errorf("eventNote = %q, want a prefix of the note and an ellipsis", got)
			}
		})
	}
}

// waitingRollout is a WorkerRollout that rolls no pool yet.
type waitingRollout struct{}

func (waitingRollout) Rollout(_ context.Context, _ *v1alpha1.Cluster, pool v1alpha1.WorkerPool) (bool, string, error) {
	return false, "pool " + pool.Name + ": waiting", nil
}

// TestAPoolAddedBeforeClientsMovedRollsWithTheOthers: a pool added to the
// spec in phase 1 before clients moved to the new client CA (its nodes
// joined with certificates from the old CAs) becomes pending, so that it
// rolls and Prepared waits for it; once clients had moved, a pool added
// joins with the new CAs' certificates and is not.
func TestAPoolAddedBeforeClientsMovedRollsWithTheOthers(t *testing.T) {
	for _, moved := range []bool{false, true} {
		t.Run(fmt.Sprintf("clients moved: %t", moved), func(t *testing.T) {
			started := metav1.NewTime(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
			c := &v1alpha1.Cluster{Spec: v1alpha1.ClusterSpec{Workers: []v1alpha1.WorkerPool{
				{Name: "pool-a", RolloutStrategy: v1alpha1.RolloutInPlace}, {Name: "pool-b", RolloutStrategy: v1alpha1.RolloutInPlace}}}}
			c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{
				Phase: v1alpha1.RotationPreparing, LastInitiationTime: &started,
				PendingWorkersRollouts: []v1alpha1.PendingWorkersRollout{{Name: "pool-a", LastInitiationTime: &started}}}}}
			r := &Reconciler{Recorder: events.NewFakeRecorder(10),
				WorkerRollouts: map[v1alpha1.WorkerRolloutStrategy]WorkerRollout{v1alpha1.RolloutInPlace: waitingRollout{}}}
			s := &scope{cluster: c, clientsMoved: moved}
			if err := r.workerPhase(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range pendingPools(c) {
				names = append(names, p.Name)
			}
			want := []string{"pool-a", "pool-b"}
			if moved {
				want = want[:1]
			}
			if !slices.Equal(names, want) {
				t.Errorf("pending pools %v, want %v", names, want)
			}
			if len(s.waitingPools) != len(want) {
				t.Errorf("waiting for %q, want every pending pool", s.waitingPools)
			}
		})
	}
}

// TestAPendingPoolRemovedFromTheSpecIsDone: a pending pool removed from the
// spec past the webhook (off, or failing open) has no nodes left to roll,
// held or not; a held one stayed pending for ever, and both operations that
// could release it refuse a pool the spec does not name.
func TestAPendingPoolRemovedFromTheSpecIsDone(t *testing.T) {
	c := &v1alpha1.Cluster{Spec: v1alpha1.ClusterSpec{Workers: []v1alpha1.WorkerPool{{Name: "kept", RolloutStrategy: v1alpha1.RolloutInPlace}}}}
	c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{
		Phase: v1alpha1.RotationWaitingForWorkersRollout, PendingWorkersRollouts: []v1alpha1.PendingWorkersRollout{
			{Name: "kept", Held: true}, {Name: "removed-held", Held: true}, {Name: "removed"}}}}}
	r := &Reconciler{Recorder: events.NewFakeRecorder(10),
		WorkerRollouts: map[v1alpha1.WorkerRolloutStrategy]WorkerRollout{v1alpha1.RolloutInPlace: waitingRollout{}}}
	if _, err := r.rollWorkers(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if pending := pendingPools(c); len(pending) != 1 || pending[0].Name != "kept" || !pending[0].Held {
		t.Errorf("pending %+v, want the held pool of the spec alone", pending)
	}
}
