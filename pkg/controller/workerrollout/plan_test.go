package workerrollout

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

const offlineAfter = 10 * time.Minute

func node(name string, action noderenewal.Action, away time.Duration) NodeState {
	return NodeState{Name: name, Action: action, LastSeen: t0.Add(-away)}
}

// inFlight is a node to ask that was asked for an earlier request (a phase
// aborted) and has not answered it.
func inFlight(name string, away time.Duration) NodeState {
	n := node(name, noderenewal.Ask, away)
	n.InFlight = true
	return n
}

// unconfirmed is n behind for less than OfflineConfirmation.
func unconfirmed(n NodeState) NodeState {
	n.Unconfirmed = true
	return n
}

func TestPlanRollout(t *testing.T) {
	one, all := intstr.FromInt32(1), intstr.FromString("100%")
	for _, tt := range []struct {
		name           string
		nodes          []NodeState
		maxUnavailable intstr.IntOrString
		wantAsk        []string
		wantRenewing   int
		wantOffline    []string
		wantDone       bool
	}{
		{name: "an empty pool is rolled", maxUnavailable: one, wantDone: true},
		{
			name:           "one at a time, by name",
			nodes:          []NodeState{node("c", noderenewal.Ask, 0), node("a", noderenewal.Ask, 0), node("b", noderenewal.Ask, 0)},
			maxUnavailable: one, wantAsk: []string{"a"}, wantRenewing: 1,
		},
		{
			name:           "a node asked and not answered takes the slot",
			nodes:          []NodeState{node("a", noderenewal.Wait, 0), node("b", noderenewal.Ask, 0)},
			maxUnavailable: one, wantRenewing: 1,
		},
		{
			name:           "the next node once the first renewed",
			nodes:          []NodeState{node("a", noderenewal.Done, 0), node("b", noderenewal.Ask, 0), node("c", noderenewal.Ask, 0)},
			maxUnavailable: one, wantAsk: []string{"b"}, wantRenewing: 1,
		},
		{
			name:           "a node that answered with other credentials is asked again, in a slot",
			nodes:          []NodeState{node("a", noderenewal.AskAgain, 0), node("b", noderenewal.Ask, 0)},
			maxUnavailable: one, wantAsk: []string{"a"}, wantRenewing: 1,
		},
		{
			name:           "all at once at 100%",
			nodes:          []NodeState{node("a", noderenewal.Ask, 0), node("b", noderenewal.Ask, 0), node("c", noderenewal.Wait, 0)},
			maxUnavailable: all, wantAsk: []string{"a", "b"}, wantRenewing: 3,
		},
		{
			name: "25% of 8 nodes is 2",
			nodes: []NodeState{node("a", noderenewal.Ask, 0), node("b", noderenewal.Ask, 0), node("c", noderenewal.Ask, 0), node("d", noderenewal.Ask, 0),
				node("e", noderenewal.Ask, 0), node("f", noderenewal.Ask, 0), node("g", noderenewal.Ask, 0), node("h", noderenewal.Ask, 0)},
			maxUnavailable: intstr.FromString("25%"), wantAsk: []string{"a", "b"}, wantRenewing: 2,
		},
		{
			name:           "25% of 3 nodes rounds down to 0, and one node renews anyway",
			nodes:          []NodeState{node("a", noderenewal.Ask, 0), node("b", noderenewal.Ask, 0), node("c", noderenewal.Ask, 0)},
			maxUnavailable: intstr.FromString("25%"), wantAsk: []string{"a"}, wantRenewing: 1,
		},
		{
			name:           "more nodes renewing than slots (maxUnavailable lowered): nobody new is asked",
			nodes:          []NodeState{node("a", noderenewal.Wait, 0), node("b", noderenewal.Wait, 0), node("c", noderenewal.Ask, 0)},
			maxUnavailable: one, wantRenewing: 2,
		},
		{
			name:           "an offline node is not asked and takes no slot",
			nodes:          []NodeState{node("a", noderenewal.Ask, offlineAfter+time.Second), node("b", noderenewal.Ask, 0)},
			maxUnavailable: one, wantAsk: []string{"b"}, wantRenewing: 1, wantOffline: []string{"a"},
		},
		{
			// Its renewal may be what took it down: the next one waits.
			name:           "a node asked that went silent keeps its slot",
			nodes:          []NodeState{node("a", noderenewal.Wait, time.Hour), node("b", noderenewal.Ask, 0)},
			maxUnavailable: one, wantRenewing: 1,
		},
		{
			name:           "a pool whose every node went silent once asked is not rolled",
			nodes:          []NodeState{node("a", noderenewal.Wait, time.Hour), node("b", noderenewal.Wait, time.Hour), node("c", noderenewal.Done, 0)},
			maxUnavailable: all, wantRenewing: 2,
		},
		{
			name:           "not seen for exactly the timeout is still online",
			nodes:          []NodeState{node("a", noderenewal.Wait, offlineAfter)},
			maxUnavailable: one, wantRenewing: 1,
		},
		{
			name:           "a node that renewed is done even when offline now",
			nodes:          []NodeState{node("a", noderenewal.Done, time.Hour), node("b", noderenewal.Done, 0)},
			maxUnavailable: one, wantDone: true,
		},
		{
			// An abort while b renewed for Preparing: b holds a slot.
			name:           "a node renewing for an earlier request keeps its slot and is asked the current one",
			nodes:          []NodeState{node("a", noderenewal.Ask, 0), inFlight("b", 0), node("c", noderenewal.Ask, 0)},
			maxUnavailable: one, wantAsk: []string{"b"}, wantRenewing: 1,
		},
		{
			name:           "nodes renewing for an earlier request beyond the slots are asked, nobody else",
			nodes:          []NodeState{inFlight("c", 0), inFlight("b", 0), node("a", noderenewal.Ask, 0)},
			maxUnavailable: one, wantAsk: []string{"b", "c"}, wantRenewing: 2,
		},
		{
			name:           "a node asked for an earlier request that went silent is not offline: it keeps its slot",
			nodes:          []NodeState{inFlight("a", time.Hour), node("b", noderenewal.Ask, 0)},
			maxUnavailable: one, wantAsk: []string{"a"}, wantRenewing: 1,
		},
		{
			name:           "in-flight nodes first, then the free slots by name",
			nodes:          []NodeState{node("a", noderenewal.Ask, 0), inFlight("z", 0), node("b", noderenewal.Ask, 0)},
			maxUnavailable: intstr.FromInt32(2), wantAsk: []string{"z", "a"}, wantRenewing: 2,
		},
		{
			name:           "rolled without the offline nodes",
			nodes:          []NodeState{node("a", noderenewal.Done, 0), node("y", noderenewal.Ask, 2*time.Hour), node("m", noderenewal.Ask, time.Hour)},
			maxUnavailable: one, wantOffline: []string{"m", "y"}, wantDone: true,
		},
		{
			// The API server was away for two hours, and is back: b and c
			// have not renewed their Leases yet.
			name: "nodes behind, not for long enough to be offline, are neither asked nor offline: the pool waits",
			nodes: []NodeState{node("a", noderenewal.Done, 0), unconfirmed(node("b", noderenewal.Ask, 2*time.Hour)),
				unconfirmed(node("c", noderenewal.Ask, 2*time.Hour)), unconfirmed(node("d", noderenewal.Ask, 0))},
			maxUnavailable: one, wantAsk: []string{"d"}, wantRenewing: 1,
		},
		{
			name:           "only nodes behind left: the pool is not rolled",
			nodes:          []NodeState{node("a", noderenewal.Done, 0), unconfirmed(node("b", noderenewal.Ask, 2*time.Hour))},
			maxUnavailable: one,
		},
		{
			// Its renewal ran (and restarted its kubelet): it was asked.
			name:           "a node that answered with other credentials and went silent is not offline: it is asked again first",
			nodes:          []NodeState{node("a", noderenewal.Done, 0), node("z", noderenewal.AskAgain, 2*time.Hour), node("m", noderenewal.Ask, 0)},
			maxUnavailable: one, wantAsk: []string{"z"}, wantRenewing: 1,
		},
		{
			name:           "nodes that answered with other credentials are asked again within the free slots, before the others",
			nodes:          []NodeState{node("a", noderenewal.Ask, 0), node("z", noderenewal.AskAgain, 0), node("y", noderenewal.AskAgain, 0), node("w", noderenewal.Wait, 0)},
			maxUnavailable: intstr.FromInt32(2), wantAsk: []string{"y"}, wantRenewing: 2,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := PlanRollout(tt.nodes, tt.maxUnavailable, offlineAfter, t0)
			var asked, offline []string
			for _, a := range p.Ask {
				asked = append(asked, a.Name)
			}
			for _, o := range p.Offline {
				offline = append(offline, o.Name)
			}
			if !slices.Equal(asked, tt.wantAsk) || p.Renewing != tt.wantRenewing || !slices.Equal(offline, tt.wantOffline) || p.Done() != tt.wantDone {
				t.Fatalf("PlanRollout = ask %v, renewing %d, offline %v, done %v; want ask %v, renewing %d, offline %v, done %v",
					asked, p.Renewing, offline, p.Done(), tt.wantAsk, tt.wantRenewing, tt.wantOffline, tt.wantDone)
			}
		})
	}
}

// TestPlanMessageOfAPoolWithManyNodesOffline: the message names a few of
// the offline nodes and says how many more, so that a zone outage does not
// grow it past the condition's 32 KiB (which had the API server refuse every
// status write) nor the event's 1 KiB past the advice.
func TestPlanMessageOfAPoolWithManyNodesOffline(t *testing.T) {
	request := noderenewal.Request{Initiated: time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC), Phase: v1alpha1.RotationPreparing}
	nodes := []NodeState{node("online", noderenewal.Done, 0)}
	for i := range 600 {
		nodes = append(nodes, node(fmt.Sprintf("ip-10-0-%03d-17.eu-central-1.compute.internal-%d", i%256, i), noderenewal.Ask, time.Hour))
	}
	got := PlanRollout(nodes, intstr.FromInt32(1), offlineAfter, t0).Message("workers", offlineAfter, request)
	advice := "annotate its Node carousel.dev/renew-credentials=2026-11-23T09:00:00Z/Preparing"
	if len(got) > 1024 || !strings.Contains(got, "and 595 more") || !strings.Contains(got, advice) {
		t.Fatalf("Message (%d bytes) =\n%s\nwant at most 1 KiB, naming 5 nodes and 595 more, with %q", len(got), got, advice)
	}
}

func TestPlanMessage(t *testing.T) {
	request := noderenewal.Request{Initiated: time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC), Phase: v1alpha1.RotationPreparing}
	for _, tt := range []struct {
		name  string
		nodes []NodeState
		want  string
	}{
		{
			name:  "waiting",
			nodes: []NodeState{node("a", noderenewal.Done, 0), node("b", noderenewal.Wait, 0), node("c", noderenewal.Ask, 0)},
			want:  "pool workers: 1 of 3 nodes renewed their credentials, 1 renewing",
		},
		{
			name:  "waiting, with an offline node",
			nodes: []NodeState{node("a", noderenewal.Wait, 0), node("b", noderenewal.Ask, 90*time.Minute)},
			want: "pool workers: 0 of 2 nodes renewed their credentials, 1 renewing, 1 offline (Lease over 10m0s behind the newest node Lease, not waited for: " +
				"b (last seen 2026-11-23T10:30:00Z)); an offline node needs a fresh bootstrap kubeconfig if it comes back after the old CAs were dropped",
		},
		{
			name:  "waiting for a node asked and silent since",
			nodes: []NodeState{node("a", noderenewal.Done, 0), node("b", noderenewal.Wait, 11*time.Minute), node("c", noderenewal.Ask, 0)},
			want: "pool workers: 1 of 3 nodes renewed their credentials, 1 renewing; asked and silent since, each keeping its slot until it answers " +
				"or its Node is deleted: b (last seen 2026-11-23T11:49:00Z)",
		},
		{
			name:  "waiting for a node behind, not for long enough to be offline",
			nodes: []NodeState{node("a", noderenewal.Done, 0), unconfirmed(node("b", noderenewal.Ask, 90*time.Minute))},
			want: "pool workers: 1 of 2 nodes renewed their credentials, 0 renewing; Lease over 10m0s behind the newest node Lease, for less than 40s: " +
				"not asked, and offline if it stays so (it may be one not renewed yet since the API server was away): b (last seen 2026-11-23T10:30:00Z)",
		},
		{
			name:  "done without offline nodes",
			nodes: []NodeState{node("a", noderenewal.Done, 0), node("c", noderenewal.Ask, time.Hour), node("b", noderenewal.Ask, 11*time.Minute)},
			want: "pool workers: rolled without 2 offline node(s) (Lease over 10m0s behind the newest node Lease, not waited for: " +
				"b (last seen 2026-11-23T11:49:00Z), c (last seen 2026-11-23T11:00:00Z)); one that comes back is not asked: " +
				"annotate its Node carousel.dev/renew-credentials=2026-11-23T09:00:00Z/Preparing; an offline node needs a fresh bootstrap kubeconfig if it comes back after the old CAs were dropped",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := PlanRollout(tt.nodes, intstr.FromInt32(1), offlineAfter, t0).Message("workers", offlineAfter, request); got != tt.want {
				t.Fatalf("Message =\n%s\nwant\n%s", got, tt.want)
			}
			// The status is written when the message changes: it must not
			// change while the other nodes renew their Leases.
			if later := PlanRollout(tt.nodes, intstr.FromInt32(1), offlineAfter, t0.Add(10*time.Second)).Message("workers", offlineAfter, request); later != tt.want {
				t.Errorf("Message 10s of Lease renewals later =\n%s\nwant it unchanged", later)
			}
		})
	}
	// In an abort, what an offline node that renewed for Preparing loses
	// is its certificate from the new client CA.
	aborting := request
	aborting.Phase = v1alpha1.RotationAborting
	got := PlanRollout([]NodeState{node("a", noderenewal.Done, 0), node("b", noderenewal.Ask, time.Hour)}, intstr.FromInt32(1), offlineAfter, t0).
		Message("workers", offlineAfter, aborting)
	if !strings.HasSuffix(got, "(last seen 2026-11-23T11:00:00Z)); the abort keeps the new CAs while an offline node that renewed before it holds a certificate from them (unless forced), "+
		"and asks it to renew, which its node agent does once it is back") {
		t.Errorf("Message in an abort = %s", got)
	}
	// In Finalizing the old CAs are gone already: one that renewed for
	// Preparing comes back to what it trusts and holds.
	finalizing := request
	finalizing.Phase = v1alpha1.RotationFinalizing
	got = PlanRollout([]NodeState{node("a", noderenewal.Done, 0), node("b", noderenewal.Ask, time.Hour)}, intstr.FromInt32(1), offlineAfter, t0).
		Message("workers", offlineAfter, finalizing)
	if !strings.HasSuffix(got, "annotate its Node carousel.dev/renew-credentials=2026-11-23T09:00:00Z/Finalizing; an offline node that renewed in Preparing "+
		"still reaches the API server when it comes back, one that did not needs a fresh bootstrap kubeconfig") {
		t.Errorf("Message in Finalizing = %s", got)
	}
}

// TestHeartbeats: a node was last seen at its Lease's renewTime, or, without
// one, when it was created; the newest renewTime of any Lease, of a pool's
// node or not, is what every node is measured against.
func TestHeartbeats(t *testing.T) {
	nodeAt := func(name string, created time.Time) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)}}
	}
	leaseAt := func(name string, renewed *time.Time) coordinationv1.Lease {
		l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if renewed != nil {
			l.Spec.RenewTime = &metav1.MicroTime{Time: *renewed}
		}
		return l
	}
	at := func(d time.Duration) *time.Time { t := t0.Add(d); return &t }
	nodes := []corev1.Node{nodeAt("a", t0.Add(-time.Hour)), nodeAt("b", t0.Add(-time.Hour)), nodeAt("c", t0.Add(-time.Minute)), nodeAt("d", t0)}
	leases := []coordinationv1.Lease{
		leaseAt("a", at(-5*time.Second)),
		leaseAt("b", at(-20*time.Minute)),
		leaseAt("c", nil),                      // no renewTime yet: created counts
		leaseAt("d", at(-time.Hour)),           // renewed before the Node was created (a Node of that name before it): created counts
		leaseAt("other-pool", at(time.Second)), // the newest heartbeat, of a node outside the pool
		leaseAt("ahead", at(time.Hour)),        // a node whose clock runs an hour ahead: taken as renewed now
	}
	seen, newest := Heartbeats(nodes, leases, *at(time.Second))
	want := map[string]time.Time{"a": *at(-5 * time.Second), "b": *at(-20 * time.Minute), "c": t0.Add(-time.Minute), "d": t0}
	if len(seen) != len(want) {
		t.Fatalf("seen = %v, want %v", seen, want)
	}
	for name, w := range want {
		if !seen[name].Equal(w) {
			t.Errorf("seen[%s] = %s, want %s", name, seen[name], w)
		}
	}
	if !newest.Equal(*at(time.Second)) {
		t.Errorf("newest = %s, want %s", newest, *at(time.Second))
	}
	// Measured against the newest heartbeat, not a time to come: only b is
	// more than offlineAfter behind.
	var states []NodeState
	for _, n := range []string{"a", "b", "c", "d"} {
		states = append(states, NodeState{Name: n, Action: noderenewal.Ask, LastSeen: seen[n]})
	}
	var offline []string
	for _, o := range PlanRollout(states, intstr.FromString("100%"), offlineAfter, newest).Offline {
		offline = append(offline, o.Name)
	}
	if !slices.Equal(offline, []string{"b"}) {
		t.Errorf("offline = %v, want [b]", offline)
	}
}

// FuzzPlanRollout checks PlanRollout's invariants on any pool: nodes are
// asked only when they need asking and are online, every node renewing for
// an earlier request among them; never more renew than
// the slots allow unless they were already renewing; an offline node is
// never asked and never waited for; the pool is done exactly when every node
// renewed or is offline; and a pool that is not done and has a free slot
// asks someone, so a rollout always progresses.
func FuzzPlanRollout(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0, 1}, int32(1), false)
	f.Add([]byte{3, 3, 2, 2, 1, 1, 0, 0}, int32(50), true)
	f.Add([]byte{}, int32(0), true)
	f.Add([]byte{6, 2, 14, 1, 102}, int32(1), false) // nodes renewing for an earlier request (Ask, bit 4), one silent
	f.Fuzz(func(t *testing.T, spec []byte, max int32, percent bool) {
		mu := intstr.FromInt32(max)
		if percent {
			mu = intstr.FromString(fmt.Sprintf("%d%%", max))
		}
		var nodes []NodeState
		for i, b := range spec {
			away := time.Duration(b>>3) * time.Minute // 0..31 minutes
			action := noderenewal.Action(b % 4)
			nodes = append(nodes, NodeState{Name: fmt.Sprintf("n%03d", i), Action: action, LastSeen: t0.Add(-away),
				InFlight: action == noderenewal.Ask && b&4 != 0, Unconfirmed: b&8 != 0}) // for the nodes behind: an odd number of minutes
		}
		p := PlanRollout(nodes, mu, offlineAfter, t0)
		offline, byName := map[string]bool{}, map[string]NodeState{}
		for _, o := range p.Offline {
			offline[o.Name] = true
		}
		waiting, renewed, inFlight := 0, 0, 0
		for _, n := range nodes {
			byName[n.Name] = n
			switch {
			case n.Action == noderenewal.Wait:
				waiting++
			case n.Action == noderenewal.Done:
				renewed++
			case n.InFlight:
				inFlight++
			}
		}
		if p.Renewed != renewed {
			t.Fatalf("renewed %d, but %d nodes answered as expected", p.Renewed, renewed)
		}
		fresh, askedInFlight := 0, 0
		for _, a := range p.Ask {
			if n := byName[a.Name]; n != a || (a.Action != noderenewal.Ask && a.Action != noderenewal.AskAgain) {
				t.Fatalf("asked %+v, the node is %+v", a, n)
			}
			if offline[a.Name] {
				t.Fatalf("asked offline node %s", a.Name)
			}
			if a.InFlight {
				askedInFlight++
			} else {
				fresh++
			}
		}
		if askedInFlight != inFlight {
			t.Fatalf("asked %d of the %d nodes renewing for an earlier request", askedInFlight, inFlight)
		}
		// The nodes to ask again come before those not asked yet.
		askedFresh := slices.ContainsFunc(p.Ask, func(a NodeState) bool { return a.Action == noderenewal.Ask && !a.InFlight })
		for _, n := range nodes {
			if n.Action == noderenewal.AskAgain && askedFresh && !slices.ContainsFunc(p.Ask, func(a NodeState) bool { return a.Name == n.Name }) {
				t.Fatalf("asked a node not asked yet before %s, which answered with other credentials (%+v)", n.Name, p)
			}
		}
		for _, o := range p.Offline {
			if n := byName[o.Name]; n.Action != noderenewal.Ask || n.InFlight || n.Unconfirmed || t0.Sub(n.LastSeen) <= offlineAfter {
				t.Fatalf("%s counted offline: action %v, in flight %t, unconfirmed %t, away %s", o.Name, n.Action, n.InFlight, n.Unconfirmed, t0.Sub(n.LastSeen))
			}
		}
		behind := map[string]bool{}
		for _, o := range p.Behind {
			behind[o.Name] = true
		}
		for _, n := range nodes {
			wantBehind := n.Action == noderenewal.Ask && !n.InFlight && n.Unconfirmed && t0.Sub(n.LastSeen) > offlineAfter
			if behind[n.Name] != wantBehind || behind[n.Name] && (offline[n.Name] || slices.ContainsFunc(p.Ask, func(a NodeState) bool { return a.Name == n.Name })) {
				t.Fatalf("%s: behind %t, offline %t, want behind %t and then neither asked nor offline (%+v)", n.Name, behind[n.Name], offline[n.Name], wantBehind, p)
			}
		}
		slots := Slots(mu, len(nodes))
		if fresh > 0 && p.Renewing > slots {
			t.Fatalf("asked %d more with %d renewing in %d slots", fresh, p.Renewing, slots)
		}
		if p.Renewing != waiting+len(p.Ask) {
			t.Fatalf("renewing %d, want %d waiting + %d asked", p.Renewing, waiting, len(p.Ask))
		}
		if p.Done() != (p.Renewed+len(p.Offline) == len(nodes)) || (p.Done() && (len(p.Ask) > 0 || p.Renewing > 0)) {
			t.Fatalf("done %v with renewed %d, offline %d, renewing %d of %d", p.Done(), p.Renewed, len(p.Offline), p.Renewing, len(nodes))
		}
		if !p.Done() && p.Renewing == 0 && len(p.Behind) == 0 {
			t.Fatalf("not done and nobody renewing: the rollout would stall (%+v)", p)
		}
		if !strings.HasPrefix(p.Message("pool", offlineAfter, noderenewal.Request{}), "pool pool: ") {
			t.Fatalf("message %q", p.Message("pool", offlineAfter, noderenewal.Request{}))
		}
	})
}
