package cluster

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
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
		[]corev1.Node{node("up", "default", "aa"), node("gone", "default", "bb"), node("waited-for", "patient", "bb"), node("no-pool", "", "bb")},
		[]coordinationv1.Lease{lease("up", 0), lease("gone", away), lease("waited-for", away), lease("no-pool", away)})
	want := []oldca.Node{{Name: "up", ClientIssuer: "aa"}, {Name: "gone", ClientIssuer: "bb", Offline: true},
		{Name: "waited-for", ClientIssuer: "bb"}, {Name: "no-pool", ClientIssuer: "bb", Offline: true}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("node %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
