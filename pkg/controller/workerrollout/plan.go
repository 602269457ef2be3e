package workerrollout

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
)

// NodeState is what an InPlace rollout knows of one node of the pool.
type NodeState struct {
	Name string
	// Action is what the node's annotations call for (noderenewal.Assess).
	Action noderenewal.Action
	// LastSeen is when the node last showed it is alive: its Lease's
	// renewTime, or, without a Lease, when the Node was created.
	LastSeen time.Time
	// InFlight: the node is to be asked (Action Ask) but was asked for an
	// earlier request it has not answered (a phase aborted while it
	// renewed): it may be renewing now.
	InFlight bool
	// Unconfirmed: its Lease is behind, but has not been for
	// OfflineConfirmation yet (see OfflineNodes): its kubelet may not have
	// renewed yet since the API server came back.
	Unconfirmed bool
}

// Plan is what an InPlace rollout does about a pool now.
type Plan struct {
	// Ask are the nodes to ask to renew now, with what to ask
	// (noderenewal.Ask or noderenewal.AskAgain): those InFlight, then those
	// to ask again, then the others, each in order of name.
	Ask []NodeState
	// Renewed counts the nodes that answered with the expected credentials.
	Renewed int
	// Renewing counts the nodes asked and not answered yet, Ask included.
	Renewing int
	// Offline are the nodes the rollout does not wait for: not renewed, not
	// asked, and not seen for longer than the offline timeout.
	Offline []OfflineNode
	// Silent are the nodes asked and not seen since for longer than the
	// offline timeout: the renewal may be what took them down, so each
	// keeps its slot (and counts in Renewing) until it answers, or its Node
	// is deleted.
	Silent []OfflineNode
	// Behind are the nodes not asked, not seen for longer than the offline
	// timeout, but not seen so by Carousel for OfflineConfirmation yet
	// (Unconfirmed), however far behind: they are neither asked nor offline
	// yet, and the pool waits for them.
	Behind []OfflineNode
	// Total counts the pool's nodes.
	Total int
}

// OfflineNode is a node the rollout does not wait for.
type OfflineNode struct {
	Name string
	// LastSeen is when it last showed it is alive (see Heartbeats).
	LastSeen time.Time
}

// Done reports whether the pool is rolled: every node renewed or offline.
func (p Plan) Done() bool { return p.Renewed+len(p.Offline) == p.Total }

// PlanRollout decides which nodes of a pool to ask now. A node that renewed
// is done. The nodes asked and not answered take slots first, even when
// silent since (Silent): a renewal that took its node down must not free a
// slot for the next one, as a Deployment's rollout counts a Pod that does
// not come back as unavailable. A node asked for an earlier request it has
// not answered (InFlight) is such a node too, and is asked the current one
// first, in the slot it holds. A node that answered this one with other
// credentials than expected (noderenewal.AskAgain: its renewal ran, and
// restarted its kubelet) is asked again before the nodes not asked yet,
// within the free slots, and is never taken for offline. A node not asked,
// and last seen more than offlineAfter before newest (the newest heartbeat
// of any node; see Heartbeats), is offline once it is no longer Unconfirmed
// (Behind until then, and waited for): it is neither asked nor waited for,
// and does not take a slot. The others renew at most maxUnavailable at a time (a number,
// or a percentage of the pool rounded down; at least one): the free slots
// go to the nodes to ask, by name.
func PlanRollout(nodes []NodeState, maxUnavailable intstr.IntOrString, offlineAfter time.Duration, newest time.Time) Plan {
	p := Plan{Total: len(nodes)}
	var inFlight, again, toAsk []NodeState
	for _, n := range nodes {
		away := newest.Sub(n.LastSeen)
		switch {
		case n.Action == noderenewal.Done:
			p.Renewed++
		case n.Action == noderenewal.Wait || n.InFlight:
			p.Renewing++
			if away > offlineAfter {
				p.Silent = append(p.Silent, OfflineNode{Name: n.Name, LastSeen: n.LastSeen})
			}
			if n.Action != noderenewal.Wait {
				inFlight = append(inFlight, n)
			}
		case n.Action == noderenewal.AskAgain:
			again = append(again, n)
		case away > offlineAfter && n.Unconfirmed:
			p.Behind = append(p.Behind, OfflineNode{Name: n.Name, LastSeen: n.LastSeen})
		case away > offlineAfter:
			p.Offline = append(p.Offline, OfflineNode{Name: n.Name, LastSeen: n.LastSeen})
		default:
			toAsk = append(toAsk, n)
		}
	}
	stateByName := func(a, b NodeState) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(inFlight, stateByName)
	slices.SortFunc(again, stateByName)
	slices.SortFunc(toAsk, stateByName)
	toAsk = slices.Concat(again, toAsk)
	byName := func(a, b OfflineNode) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(p.Offline, byName)
	slices.SortFunc(p.Silent, byName)
	slices.SortFunc(p.Behind, byName)
	free := max(Slots(maxUnavailable, len(nodes))-p.Renewing, 0)
	asked := toAsk[:min(free, len(toAsk))]
	p.Ask = slices.Concat(inFlight, asked)
	p.Renewing += len(asked)
	return p
}

// Slots is how many nodes of a pool of total may renew at a time:
// maxUnavailable, scaled down from a percentage, and at least one.
func Slots(maxUnavailable intstr.IntOrString, total int) int {
	n, err := intstr.GetScaledValueFromIntOrPercent(&maxUnavailable, total, false)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// Message says where the pool stands: for the Cluster's CARotation
// condition while it is not done, and, when it is done but some nodes were
// offline, for the event that names them and says how to ask such a node
// for request, the pool's, by hand (in an abort, that the abort asks it).
func (p Plan) Message(pool string, offlineAfter time.Duration, request noderenewal.Request) string {
	var b strings.Builder
	if p.Done() {
		fmt.Fprintf(&b, "pool %s: rolled without %d offline node(s)", pool, len(p.Offline))
	} else {
		fmt.Fprintf(&b, "pool %s: %d of %d nodes renewed their credentials, %d renewing", pool, p.Renewed, p.Total, p.Renewing)
		if len(p.Offline) > 0 {
			fmt.Fprintf(&b, ", %d offline", len(p.Offline))
		}
	}
	if len(p.Behind) > 0 {
		fmt.Fprintf(&b, "; Lease over %s behind the newest node Lease, for less than %s: not asked, and offline if it stays so "+
			"(it may be one not renewed yet since the API server was away): %s", offlineAfter, OfflineConfirmation, lastSeen(p.Behind))
	}
	if len(p.Silent) > 0 {
		fmt.Fprintf(&b, "; asked and silent since, each keeping its slot until it answers or its Node is deleted: %s", lastSeen(p.Silent))
	}
	if len(p.Offline) > 0 {
		fmt.Fprintf(&b, " (Lease over %s behind the newest node Lease, not waited for: %s)", offlineAfter, lastSeen(p.Offline))
		if p.Done() && request.Phase != v1alpha1.RotationAborting {
			// Nothing asks a node of a rolled pool again.
			fmt.Fprintf(&b, "; one that comes back is not asked: annotate its Node %s=%s", v1alpha1.AnnotationRenewCredentials, request)
		}
		switch request.Phase {
		case v1alpha1.RotationAborting:
			// One that renewed in Preparing holds a certificate from the new
			// client CA: the abort asks it (AskNodes).
			b.WriteString("; the abort keeps the new CAs while an offline node that renewed before it holds a certificate from them (unless forced), " +
				"and asks it to renew, which its node agent does once it is back")
		case v1alpha1.RotationFinalizing:
			// The old CAs are gone already; one that renewed in Preparing
			// trusts and holds only what stays.
			b.WriteString("; an offline node that renewed in Preparing still reaches the API server when it comes back, one that did not needs a fresh bootstrap kubeconfig")
		default:
			b.WriteString("; an offline node needs a fresh bootstrap kubeconfig if it comes back after the old CAs were dropped")
		}
	}
	return b.String()
}

// lastSeenShown is how many nodes lastSeen names: the message goes into a
// condition (at most 32 KiB) and an event (cut at 1 KiB), and a zone outage
// can take hundreds of a pool's nodes offline.
const lastSeenShown = 5

// lastSeen names each node with its last heartbeat, not how long ago it
// was: the message goes into the status, which a pass writes only when it
// changes. Past lastSeenShown nodes it says how many more there are.
func lastSeen(nodes []OfflineNode) string {
	names := make([]string, 0, min(len(nodes), lastSeenShown+1))
	for _, o := range nodes[:min(len(nodes), lastSeenShown)] {
		names = append(names, fmt.Sprintf("%s (last seen %s)", o.Name, o.LastSeen.UTC().Format(time.RFC3339)))
	}
	if more := len(nodes) - lastSeenShown; more > 0 {
		names = append(names, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(names, ", ")
}
