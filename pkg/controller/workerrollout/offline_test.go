package workerrollout

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestOfflineNodes: a node counts offline only once every look for
// OfflineConfirmation saw it behind; a look that does not forgets it, and a
// cluster's nodes are its own.
func TestOfflineNodes(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	prod, dev := types.NamespacedName{Namespace: "team-a", Name: "prod"}, types.NamespacedName{Namespace: "team-a", Name: "dev"}
	o := &OfflineNodes{}
	for _, look := range []struct {
		cluster types.NamespacedName
		node    string
		behind  bool
		at      time.Duration
		want    bool
	}{
		{prod, "w1", true, 0, false}, // the API server may just be back
		{prod, "w1", true, OfflineConfirmation - time.Second, false},
		{dev, "w1", true, OfflineConfirmation, false}, // another cluster's w1: from its own first look
		{prod, "w1", true, OfflineConfirmation, true},
		{prod, "w1", false, OfflineConfirmation + time.Second, false}, // it renewed
		{prod, "w1", true, OfflineConfirmation + 2*time.Second, false},
		{prod, "w1", true, 2*OfflineConfirmation + 2*time.Second, true},
		{dev, "w1", true, 2 * OfflineConfirmation, true},
	} {
		if got := o.Confirmed(look.cluster, look.node, look.behind, t0.Add(look.at)); got != look.want {
			t.Errorf("%s node %s behind %t at +%s: Confirmed = %t, want %t", look.cluster, look.node, look.behind, look.at, got, look.want)
		}
	}
	o.Forget(prod)
	if o.Confirmed(prod, "w1", true, t0.Add(3*time.Minute)) {
		t.Error("a forgotten cluster's node confirmed at its first look")
	}
	if !o.Confirmed(dev, "w1", true, t0.Add(3*time.Minute)) {
		t.Error("forgetting prod dropped dev's node")
	}
	// Looks further apart than Gap (none in between: a phase later, or the
	// reads failed and were not counted) count from anew.
	gappy := &OfflineNodes{Gap: time.Minute}
	for _, look := range []struct {
		at   time.Duration
		want bool
	}{{0, false}, {2 * time.Minute, false}, {2*time.Minute + OfflineConfirmation, true}, {20 * time.Minute, false}} {
		if got := gappy.Confirmed(prod, "w2", true, t0.Add(look.at)); got != look.want {
			t.Errorf("Gap 1m, w2 behind at +%s: Confirmed = %t, want %t", look.at, got, look.want)
		}
	}
	if o.Confirmed(dev, "w1", true, t0.Add(time.Hour+DefaultOfflineLookGap+time.Second)) {
		t.Error("a look more than DefaultOfflineLookGap after the last confirmed at once")
	}
	var none *OfflineNodes
	if !none.Confirmed(prod, "w1", true, t0) || none.Confirmed(prod, "w1", false, t0) {
		t.Error("a nil OfflineNodes does not confirm at the first look")
	}
	none.Forget(prod)
}

// TestOfflineNodesForgetsNodesNotLookedAtForAGap: a node deleted while
// behind is never seen not behind again; what a cluster holds must not grow
// with every such node (spot nodes come and go), and forgetting it changes
// nothing a look decides, as a look after a longer gap counts from anew.
func TestOfflineNodesForgetsNodesNotLookedAtForAGap(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	prod := types.NamespacedName{Namespace: "fleet", Name: "prod"}
	o := &OfflineNodes{Gap: time.Minute}
	o.Confirmed(prod, "gone", true, t0)
	// kept is behind since t0+10s, longer than Gap by the time new comes,
	// and was last looked at within Gap of it.
	for _, at := range []time.Duration{10 * time.Second, 50 * time.Second, 100 * time.Second} {
		o.Confirmed(prod, "kept", true, t0.Add(at))
	}
	o.Confirmed(prod, "new", true, t0.Add(105*time.Second))
	if _, ok := o.behind[prod]["gone"]; ok {
		t.Error("a node last looked at more than Gap ago is still remembered")
	}
	if _, ok := o.behind[prod]["kept"]; !ok {
		t.Error("a node looked at within Gap, behind for longer, was forgotten")
	}
	if !o.Confirmed(prod, "kept", true, t0.Add(110*time.Second)) {
		t.Error("forgetting another node restarted the count of one looked at within Gap")
	}
}
