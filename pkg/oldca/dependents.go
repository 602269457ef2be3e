package oldca

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// The user-name prefixes of the client certificates Carousel signs besides
// its certificate Secrets: kubelets (through their CSRs) and kubeconfigs of
// kubectl carousel kubeconfig. A kubelet is judged by its Node's report, or
// without one by the signer's record (KubeletCertificates), a kubeconfig by
// the plugin's record of it (Kubeconfigs), and either by when its
// certificate was first seen, never by its name alone.
const (
	nodeUserPrefix  = "system:node:"
	adminUserPrefix = "carousel:admin:"
)

// Facts are what the gate is decided from.
type Facts struct {
	// Started is when the rotation started (lastInitiationTime, in whole
	// seconds): no certificate from the new client CA existed before.
	Started time.Time
	// WindowStart is from when a use of a credential counts (the start of
	// the usage window), and Prepared when the rotation became Prepared: a
	// use of a user Carousel moves to the new client CA while the rotation
	// prepares (movedInPreparing) counts from the later of the two. Nothing
	// moves any other user, so a use of theirs before Prepared says as much
	// as one after.
	WindowStart, Prepared time.Time
	// NewClientIssuer is the hex subject key identifier of the new client CA,
	// as node agents report the issuer of their client certificate, and
	// OldClientIssuer that of the old one.
	NewClientIssuer, OldClientIssuer string
	// Nodes are the managed cluster's Nodes.
	Nodes []Node
	// NodesUnreadable: the managed cluster's Nodes could not be read, and
	// no earlier verdict on them is kept.
	NodesUnreadable bool
	// KeptNodes are the dependents of the last evaluation that the Nodes
	// decide (Node, Cluster nodes and Cluster kubelet-certificates), which
	// stand when the Nodes could not be read this time.
	KeptNodes []Dependent
	// Certificates are the Cluster's client certificates Carousel keeps in
	// Secrets.
	Certificates []Certificate
	// Kubeconfigs is the record of the kubeconfigs kubectl carousel
	// issued; nil when there is none. KubeconfigsUnreadable: the record
	// exists and does not parse. KubeconfigsLost: the record there when the
	// rotation started, or first seen since, is gone or another one.
	Kubeconfigs                            *Kubeconfigs
	KubeconfigsUnreadable, KubeconfigsLost bool
	// KubeletCertificates is the record of the kubelet client certificates
	// Carousel signed; nil when there is none. KubeletCertificatesUnreadable:
	// the record exists and does not parse. KubeletCertificatesLost: as
	// KubeconfigsLost.
	KubeletCertificates                                    *KubeletCertificates
	KubeletCertificatesUnreadable, KubeletCertificatesLost bool
	// Usage is what the managed API server's audit events showed; nil when
	// none were received.
	Usage *Usage
	// UsageLost: the usage record there when the rotation started is gone,
	// or is another one (deleted, then created again by the next batch), so
	// what it held of the time before, the first use of each certificate,
	// is lost.
	UsageLost bool
	// Now, and CollectingUntil: until then (Settling after the rotation
	// became Prepared), uses since Prepared may not be in Usage yet.
	Now, CollectingUntil time.Time
}

// Node is a managed cluster's Node and the issuer of the client certificate
// its node agent reports: a hex key identifier, empty when it reports none
// (a node without Carousel's node agent, which is then not judged by it).
type Node struct {
	Name         string
	ClientIssuer string
	// Offline: its Lease is older than its pool's offlineNodeTimeout, and
	// stayed so for workerrollout.OfflineConfirmation, as the worker rollout
	// judges it. With a node agent (one that
	// reports, marked the Node, or in an InPlace pool) it is not counted:
	// the agent bootstraps the kubelet again once the API server refuses
	// the old client certificate. Without one it is judged as an online
	// Node: nothing on it moves it to the new CAs when it is back.
	Offline bool
	// Agent: a node agent marked the Node as running on it
	// (v1alpha1.AnnotationNodeAgent), which it does as soon as it watches
	// the Node, long before it reports a renewal.
	Agent bool
	// InPlace: it is in an InPlace pool of the Cluster, whose nodes run the
	// node agent (one from before Agent's mark may not have marked it).
	InPlace bool
	// Unrolled, when not empty, says why no worker rollout moved the
	// node's trust to the new cluster CA (it is in no pool of the Cluster,
	// say): completing the rotation moves the API server's serving
	// certificate to the new cluster CA, which its kubelet does not trust.
	Unrolled string
}

// Certificate is a client certificate Carousel keeps in a Secret.
type Certificate struct {
	Secret string
	// User is the certificate's common name, the user the API server sees.
	User        string
	Fingerprint string
	// FromNewCA: the new client CA signed it.
	FromNewCA bool
}

// Dependent is one client that still depends on the old CAs.
type Dependent struct {
	Kind    v1alpha1.OldCADependentKind
	Name    string
	Message string
	// LastSeen is when a user was last seen authenticating that way; zero
	// for the other kinds.
	LastSeen time.Time
	// Expires is when a kubeconfig stops being one, or the certificates a
	// record of kubelet certificates lost expire; zero otherwise.
	Expires time.Time
	// ByHand: only a person changes it (a Node no rollout moved), so the
	// gate need not look again soon.
	ByHand bool
}

// kindOrder is the order in which dependents are listed.
var kindOrder = map[v1alpha1.OldCADependentKind]int{
	v1alpha1.OldCADependentCluster: 0, v1alpha1.OldCADependentNode: 1, v1alpha1.OldCADependentSecret: 2,
	v1alpha1.OldCADependentKubeconfig: 3, v1alpha1.OldCADependentUser: 4,
}

// Dependents decides who still depends on the old CAs, by kind and name:
//   - the managed cluster itself when its Nodes could not be read, while
//     the audit events since Prepared are still being collected, when
//     none came for Silence, or when the usage record left a sighting out
//     within Retention of the rotation's start, or since (Usage.Unrecorded),
//     or when the record was lost since the start (UsageLost);
//   - every Node whose node agent reports a client certificate from another
//     CA than the new client CA, or, when no node agent reports, whose kubelet
//     last got an unexpired certificate from the old client CA (its record
//     KubeletCertificates.Stranded), or that no worker rollout moved
//     (Unrolled), unless it is offline with a node agent (one that reports,
//     marked the Node, or in an InPlace pool); and the record itself when it does not parse
//     or was lost since the start;
//   - every certificate Secret whose client certificate the new client CA
//     did not sign;
//   - every user of kubectl carousel kubeconfig holding an unexpired
//     kubeconfig from the old client CA (Stranded), and the record of them
//     itself when it does not parse or was lost since the start;
//   - every user seen since f.WindowStart (and since f.Prepared, for one
//     Carousel moves, movedInPreparing) with a certificate that was in use
//     before the rotation started; with a kubeconfig or kubelet certificate
//     a record says another client CA than the new one signed; whose name is one of Carousel's
//     certificate Secrets' but whose certificate is not one of theirs from
//     the new client CA; or to whom Carousel issues no certificate at all,
//     so that only the old client CA can have signed it. A node user whose
//     Node is listed already, or a user whose kubeconfig is, is not listed
//     again.
func Dependents(f Facts) []Dependent {
	var deps []Dependent
	if f.NodesUnreadable {
		deps = append(deps, Dependent{Kind: v1alpha1.OldCADependentCluster, Name: "nodes",
			Message: "Carousel could not read the managed cluster's Nodes, so it cannot tell which client CA their kubelets use"})
	}
	listedNodes := map[string]bool{}
	for _, d := range f.KeptNodes {
		listedNodes[d.Name] = d.Kind == v1alpha1.OldCADependentNode
		deps = append(deps, d)
	}
	switch k := f.KubeletCertificates; {
	case !UnreportedNodes(f.Nodes):
		// No kubelet is judged by the record.
	case f.KubeletCertificatesLost:
		deps = append(deps, Dependent{Kind: v1alpha1.OldCADependentCluster, Name: "kubelet-certificates", Message: "the record of the kubelet " +
			"client certificates Carousel signed, that the rotation judges by was deleted since, and what it held with it, so Carousel " +
			"cannot tell which client CA signed those of kubelets without a node agent: complete with force once they run on certificates from the new client CA"})
	case f.KubeletCertificatesUnreadable:
		deps = append(deps, Dependent{Kind: v1alpha1.OldCADependentCluster, Name: "kubelet-certificates",
			Message: "the record of the kubelet client certificates Carousel signed does not parse, so Carousel cannot tell which client CA signed those of kubelets without a node agent"})
	case k != nil && k.UnrecordedUntil != nil && f.Now.Before(*k.UnrecordedUntil):
		deps = append(deps, Dependent{Kind: v1alpha1.OldCADependentCluster, Name: "kubelet-certificates", Expires: *k.UnrecordedUntil, Message: fmt.Sprintf(
			"the record of the kubelet client certificates Carousel signed had no room for some, valid until %s, so Carousel cannot tell which client CA "+
				"signed those of kubelets without a node agent: complete with force once they run on certificates from the new client CA", formatTime(*k.UnrecordedUntil))})
	}
	for _, n := range f.Nodes {
		why := ""
		switch {
		case n.recoversByItself():
		case n.ClientIssuer == "":
			why = f.KubeletCertificates.Stranded(n.Name, f.OldClientIssuer, f.Now)
		case n.ClientIssuer != f.NewClientIssuer:
			why = fmt.Sprintf("its node agent reports a client certificate from CA %s, not from the new client CA %s", short(n.ClientIssuer), short(f.NewClientIssuer))
		}
		byHand := false
		if why == "" && n.Unrolled != "" && !n.recoversByItself() {
			why, byHand = n.Unrolled+unrolledNode, true
		}
		if why != "" && n.Offline {
			why += offlineNode
		}
		if why != "" {
			listedNodes[n.Name] = true
			deps = append(deps, Dependent{Kind: v1alpha1.OldCADependentNode, Name: n.Name, Message: why, ByHand: byHand})
		}
	}
	current := map[string][]string{} // user -> fingerprints of its certificates from the new client CA
	secretOf := map[string]string{}  // user -> a Secret with its certificate
	for _, c := range f.Certificates {
		if _, ok := secretOf[c.User]; !ok {
			secretOf[c.User] = c.Secret
		}
		if c.FromNewCA {
			current[c.User] = append(current[c.User], c.Fingerprint)
			continue
		}
		deps = append(deps, Dependent{Kind: v1alpha1.OldCADependentSecret, Name: c.Secret, Message: fmt.Sprintf(
			"holds a client certificate of %s that the new client CA did not sign", c.User)})
	}
	switch {
	case f.KubeconfigsLost:
		deps = append(deps, Dependent{Kind: v1alpha1.OldCADependentCluster, Name: "kubeconfigs", Message: "the record of the kubeconfigs " +
			"kubectl carousel issued, that the rotation judges by was deleted since, and what it held with it, so Carousel cannot tell " +
			"who holds one from the old client CA: complete with force once every user of kubectl carousel kubeconfig has taken a new one"})
	case f.KubeconfigsUnreadable:
		deps = append(deps, Dependent{Kind: v1alpha1.OldCADependentCluster, Name: "kubeconfigs",
			Message: "the record of the kubeconfigs kubectl carousel issued does not parse, so Carousel cannot tell which client CA signed them: " +
				"repair it, or complete with force once every user of kubectl carousel kubeconfig has taken a new one; do not delete it, " +
				"which loses the kubeconfigs it recorded"})
	}
	stranded := f.Kubeconfigs.Stranded(f.OldClientIssuer, f.NewClientIssuer, f.Now)
	listedUsers := map[string]bool{}
	for _, d := range stranded {
		listedUsers[d.Name] = true
	}
	deps = append(deps, stranded...)
	if f.UsageLost {
		// Without the first uses it held, a certificate in use before the
		// start looks first seen after it.
		deps = append(deps, Dependent{Kind: v1alpha1.OldCADependentCluster, Name: "client-certificate-usage", Message: "the record of the client " +
			"certificates the API server saw in use, as it was when the rotation started, was deleted since, and what it held with it, so " +
			"Carousel cannot tell whether they depend on the old client CA: complete with force once their clients use certificates from the new client CA"})
	}
	if f.Usage != nil {
		deps = append(deps, users(f, current, secretOf, listedNodes, listedUsers)...)
		// What it left out may look first seen after the start, or not be there.
		if left := f.Usage.Unrecorded; left != nil && !left.Before(f.Started.Add(-Retention)) && !f.UsageLost {
			deps = append(deps, Dependent{Kind: v1alpha1.OldCADependentCluster, Name: "client-certificate-usage", Message: fmt.Sprintf(
				"the record of the client certificates the API server saw in use left some out (it had no room for them, was started over, or a batch of them was refused), "+
					"the last by %s, within %.0f hours of the rotation's start or after it, so Carousel cannot tell whether they depend on the "+
					"old client CA: complete with force once their clients use certificates from the new client CA", formatTime(*left), Retention.Hours())})
		}
		switch newest := f.Usage.Newest(f.Now); {
		case f.Now.Before(f.CollectingUntil):
			deps = append(deps, Dependent{Kind: v1alpha1.OldCADependentCluster, Name: "audit", Message: fmt.Sprintf(
				"the audit events of the API server's requests since the rotation became Prepared are still being collected, until %s",
				f.CollectingUntil.UTC().Format(time.RFC3339))})
		case newest.Before(f.Now.Add(-Silence)):
			deps = append(deps, Dependent{Kind: v1alpha1.OldCADependentCluster, Name: "audit", Message: fmt.Sprintf(
				"the last audit event Carousel recorded from the API server is from %s: it no longer hears who authenticates "+
					"(check the API server's audit webhook and carousel_audit_webhook_requests_total)", formatTime(newest))})
		}
	}
	slices.SortFunc(deps, func(a, b Dependent) int {
		return cmp.Or(cmp.Compare(kindOrder[a.Kind], kindOrder[b.Kind]), strings.Compare(a.Name, b.Name))
	})
	return deps
}

// unrolledNode follows Node.Unrolled in the message of a Node that no
// worker rollout moved: what that means, and what to do.
const unrolledNode = ", so no worker rollout moved its kubelet's trust to the new cluster CA: completing the rotation would lock the kubelet out " +
	"of the API server. Decommission the node (stop its kubelet, then delete the Node), or complete with force once its kubelet trusts the new " +
	"cluster CA; a node in a worker pool by the next rotation's start rolls with it"

// offlineNode follows the message of an offline Node without a node agent.
const offlineNode = "; it is offline, and without a node agent (none marked the Node, and it is in no InPlace pool) nothing moves it to the new CAs when it is back: delete the Node if it is gone for good"

// recoversByItself: an offline Node with a node agent (one that reports,
// marked the Node, or in an InPlace pool), which bootstraps the kubelet again
// once the API server refuses its old credentials, given a bootstrap
// kubeconfig that trusts the new cluster CA: the gate takes for granted that
// whoever provisions the machine delivers it (docs/reference/node-agent.md),
// rather than hold the rotation for a node that may never come back.
func (n Node) recoversByItself() bool {
	return n.Offline && (n.ClientIssuer != "" || n.Agent || n.InPlace)
}

// UnreportedNodes says whether some Node is judged by the record of signed
// kubelet certificates (besides the audit events): one whose node agent
// reports nothing and that does not recover by itself.
func UnreportedNodes(nodes []Node) bool {
	return slices.ContainsFunc(nodes, func(n Node) bool { return n.ClientIssuer == "" && !n.recoversByItself() })
}

// users are the users of f.Usage that depend on the old client CA, one
// Dependent each (the first reason found, the latest time seen).
func users(f Facts, current map[string][]string, secretOf map[string]string, listedNodes, listedUsers map[string]bool) []Dependent {
	byUser := map[string]*Dependent{}
	var order []string
	for _, c := range f.Usage.Credentials {
		if c.LastSeen.Before(f.WindowStart) || movedInPreparing(c.User, secretOf) && c.LastSeen.Before(f.Prepared) || listedUsers[c.User] ||
			listedNodes[strings.TrimPrefix(c.User, nodeUserPrefix)] && strings.HasPrefix(c.User, nodeUserPrefix) {
			continue
		}
		why := reason(f, c, current, secretOf)
		if why == "" {
			continue
		}
		if d, ok := byUser[c.User]; ok {
			if c.LastSeen.After(d.LastSeen) {
				d.LastSeen = c.LastSeen
			}
			continue
		}
		byUser[c.User] = &Dependent{Kind: v1alpha1.OldCADependentUser, Name: c.User, Message: why, LastSeen: c.LastSeen}
		order = append(order, c.User)
	}
	deps := make([]Dependent, 0, len(order))
	for _, u := range order {
		deps = append(deps, *byUser[u])
	}
	return deps
}

// movedInPreparing says whether user moves to the new client CA while the
// rotation prepares, so that a use before Prepared says nothing of later
// ones: a user of one of Carousel's certificate Secrets (the consumer
// loads the renewed one), a node (the worker rollout or its node agent
// renews its kubelet's certificate) or a user of kubectl carousel kubeconfig
// (who takes a new one).
func movedInPreparing(user string, secretOf map[string]string) bool {
	_, ours := secretOf[user]
	return ours || strings.HasPrefix(user, nodeUserPrefix) || strings.HasPrefix(user, adminUserPrefix)
}

// reason says why a credential seen in use depends on the old client CA,
// or "" when it does not, or Carousel cannot tell.
func reason(f Facts, c Credential, current map[string][]string, secretOf map[string]string) string {
	id := "X509SHA256=" + short(c.Fingerprint)
	// The records, of which whoever may issue kubeconfigs writes one, only
	// ever add a reason: they never clear what the audit events show.
	issued, recorded := f.Kubeconfigs.Find(c.Fingerprint)
	what := "a kubeconfig (%s) that kubectl carousel kubeconfig issued"
	if !recorded {
		issued, recorded = f.KubeletCertificates.Find(c.Fingerprint)
		what = "a kubelet client certificate (%s) that Carousel signed"
	}
	switch secret, ours := secretOf[c.User]; {
	// The certificate of a Secret that verifies against the new client CA
	// (which no one can make without its key) depends on nothing old,
	// whenever a managed API server's clock behind says it was first used.
	// The records cannot vouch for one: they are not checked that way.
	case ours && slices.Contains(current[c.User], c.Fingerprint):
		return ""
	// lastInitiationTime has whole seconds: the rotation started within the
	// second after Started, and no certificate of the new client CA is used
	// that soon (its CA does not exist yet when the start is recorded).
	case c.FirstSeen.Before(f.Started.Add(time.Second)):
		return fmt.Sprintf("authenticates with a client certificate (%s) that was in use before the rotation started, so the old client CA signed it", id)
	case recorded && issued.User == c.User && issued.Issuer != f.NewClientIssuer && f.Now.Before(issued.NotAfter):
		return fmt.Sprintf("authenticates with "+what+" %s from client CA %s, not the new client CA",
			id, formatTime(issued.IssuedAt), short(issued.Issuer))
	case ours && !slices.Contains(current[c.User], c.Fingerprint):
		return fmt.Sprintf("authenticates with a client certificate (%s) that is not the one from the new client CA in Secret %s: the client has not loaded its renewed credentials", id, secret)
	case movedInPreparing(c.User, secretOf):
		return ""
	}
	return fmt.Sprintf("authenticates with a client certificate (%s), and Carousel issues this user none from the new client CA: only the old client CA can have signed it", id)
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

// short is the start of a hex identifier, enough to tell it apart in a message.
func short(hexID string) string {
	if len(hexID) > 16 {
		return hexID[:16]
	}
	return hexID
}
