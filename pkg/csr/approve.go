// Package csr approves and signs kubelet certificate signing requests in a
// managed cluster: the decisions are pure functions of the request and of
// what the cluster knows; the controller carries them out.
package csr

import (
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// Group and user names of the TLS-bootstrapping flow.
const (
	NodesGroup          = "system:nodes"
	NodeUserPrefix      = "system:node:"
	BootstrapUserPrefix = "system:bootstrap:"
)

// Verdict is what the approver does with a request.
type Verdict string

const (
	// Approve the request.
	Approve Verdict = "Approve"
	// Deny a request that is clearly wrong for its signer.
	Deny Verdict = "Deny"
	// Ignore a request that is not Carousel's to decide (another requester,
	// another signer, or manual approval): it stays pending for an administrator.
	Ignore Verdict = "Ignore"
)

// Decision is a verdict with a machine-readable reason and a message.
type Decision struct {
	Verdict Verdict
	Reason  string
	Message string
	// Retry is when a request left pending (Ignore) is to be looked at
	// again; it is set where the decision is made, never derived from Reason,
	// and is RetryOnUpdate for every Approve and Deny.
	Retry Retry
	// Pin, when set, is the first record of a Node's addresses
	// (Policy.FirstSeenAddresses): it must be stored before the verdict is
	// carried out, and the verdict dropped when it cannot be.
	Pin *AddressPin
	// UnknownToken, when set, is the ID of the bootstrap token of the
	// Cluster's group that the request was made with and that Policy did not
	// take for Carousel's (ReasonForeignToken): not in the cache yet, or gone
	// since, which the controller tells apart.
	UnknownToken string
}

// Policy is what the approver knows about the cluster.
type Policy struct {
	// BootstrapGroup is the extra group of Carousel's bootstrap tokens.
	BootstrapGroup string
	// IsCarouselToken reports whether a bootstrap token ID is one Carousel issued.
	IsCarouselToken func(tokenID string) bool
	// AutoApproveClient and AutoApproveServing follow the Cluster's CSR approval policy.
	AutoApproveClient, AutoApproveServing bool
	// Node returns a Node as the cluster has it now, or false when it does
	// not exist.
	Node func(name string) (NodeInfo, bool)
	// FirstSeenAddresses approves only serving SANs among the addresses a
	// Node had when Carousel first evaluated one of its serving CSRs and
	// still has (see ServingAddresses); false approves the addresses the
	// Node reports now.
	FirstSeenAddresses bool
	// Pinned returns the addresses recorded for a Node, nil when none are;
	// it is only asked with FirstSeenAddresses.
	Pinned func(node string) (*AddressPin, error)
}

// NodeInfo is what the approver needs of a Node.
type NodeInfo struct {
	UID string
	// Addresses are the Node's status.addresses, which the node writes itself.
	Addresses []string
}

// AddressPin is what Carousel recorded of a Node the first time it evaluated
// one of its serving CSRs. It is bound to the Node's UID: a Node deleted and
// registered again under the same name is a new Node and gets a new pin.
type AddressPin struct {
	Node      string
	UID       string
	Addresses []string
}

// ServingAddresses returns the addresses a serving certificate of Node name
// may carry, and the pin to record before acting on them (nil when nothing
// is to be recorded). With firstSeen false they are the Node's current
// addresses, as upstream approvers have it. With firstSeen they are the
// pinned ones that the Node still has, so that a kubelet that adds an
// address to its own Node later cannot get a certificate for it, nor one
// for an address it no longer has (which may be another node's now); a Node
// without a pin, or whose pin belongs to an earlier Node of the same name,
// is pinned now with its current addresses.
func ServingAddresses(name string, node NodeInfo, firstSeen bool, pinned *AddressPin) (allowed []string, record *AddressPin) {
	if !firstSeen {
		return node.Addresses, nil
	}
	if pinned != nil && pinned.Node == name && pinned.UID == node.UID {
		return slices.DeleteFunc(slices.Clone(pinned.Addresses), func(a string) bool {
			return !slices.ContainsFunc(node.Addresses, func(b string) bool { return sameAddress(a, b) })
		}), nil
	}
	pin := &AddressPin{Node: name, UID: node.UID, Addresses: slices.Clone(node.Addresses)}
	return pin.Addresses, pin
}

// sameAddress reports whether a and b, two Node addresses, are one: the same
// string, or the same IP however written (fd00::1 and fd00:0:0:0:0:0:0:1).
func sameAddress(a, b string) bool {
	if a == b {
		return true
	}
	ip := net.ParseIP(a)
	return ip != nil && ip.Equal(net.ParseIP(b))
}

// Reasons of denials and of the approval condition.
const (
	ReasonApproved         = "CarouselApproved"
	ReasonBadRequest       = "CarouselInvalidRequest"
	ReasonBadSubject       = "CarouselInvalidSubject"
	ReasonBadUsages        = "CarouselInvalidUsages"
	ReasonUnexpectedSANs   = "CarouselUnexpectedSANs"
	ReasonUnsupportedKey   = "CarouselUnsupportedKey"
	ReasonIdentityMismatch = "CarouselIdentityMismatch"
	// ReasonOtherBootstrapToken leaves pending, until it changes, a request
	// made with a bootstrap token outside the Cluster's token group (kubeadm's,
	// or another tool's): no cache catching up makes it Carousel's.
	ReasonOtherBootstrapToken = "OtherBootstrapToken"

	// ReasonForeignToken, ReasonUnknownNode, ReasonNodeWithoutAddresses and
	// ReasonPinUnavailable leave a request pending for now: the token, the
	// Node or its addresses may just not be in the cache yet, the pinned
	// addresses may be readable again in a moment. The decisions that carry
	// them say so in their Retry; nothing compares these strings to decide.
	ReasonForeignToken         = "ForeignBootstrapToken"
	ReasonUnknownNode          = "UnknownNode"
	ReasonNodeWithoutAddresses = "NodeWithoutAddresses"
	ReasonPinUnavailable       = "PinnedAddressesUnavailable"
)

// Retry is when the controller looks again at a request a Decision leaves
// pending.
type Retry int

const (
	// RetryOnUpdate waits for the request to change (an administrator
	// decides it, or it is cleaned up): nothing Carousel waits for will
	// change the decision. It is the zero value, that of every Approve and
	// Deny.
	RetryOnUpdate Retry = iota
	// RetrySoon looks again after a short delay: what is missing (a token or
	// a Node not in the cache yet, a Node without addresses yet) may appear
	// in a moment.
	RetrySoon
	// RetryWithBackoff returns the error of a read the decision needed (the
	// pinned addresses), so that the request is retried with the
	// controller's backoff.
	RetryWithBackoff
)

func (r Retry) String() string {
	switch r {
	case RetryOnUpdate:
		return "RetryOnUpdate"
	case RetrySoon:
		return "RetrySoon"
	case RetryWithBackoff:
		return "RetryWithBackoff"
	}
	return fmt.Sprintf("Retry(%d)", int(r))
}

// Decide decides about one CSR. It never approves what it cannot attribute
// to Carousel's own bootstrap tokens or to a node renewing its own identity,
// and with manual approval it leaves every request of that kind, good or
// bad, to the administrator.
func Decide(req *certificatesv1.CertificateSigningRequest, p Policy) Decision {
	switch req.Spec.SignerName {
	case certificatesv1.KubeAPIServerClientKubeletSignerName:
		return decideClient(req, p)
	case certificatesv1.KubeletServingSignerName:
		return decideServing(req, p)
	}
	return Decision{Verdict: Ignore, Reason: "OtherSigner", Message: "not a kubelet signer"}
}

func decideClient(req *certificatesv1.CertificateSigningRequest, p Policy) Decision {
	if !p.AutoApproveClient {
		return Decision{Verdict: Ignore, Reason: "ManualApproval", Message: "client CSRs are approved by an administrator for this cluster"}
	}
	parsed, bad := validate(req)
	if bad != nil {
		return *bad
	}
	cn := parsed.Subject.CommonName
	switch {
	case strings.HasPrefix(req.Spec.Username, BootstrapUserPrefix):
		tokenID := strings.TrimPrefix(req.Spec.Username, BootstrapUserPrefix)
		if !slices.Contains(req.Spec.Groups, p.BootstrapGroup) {
			// The API server sets the groups from the token's Secret: not
			// one of Carousel's, and not about to be.
			return Decision{Verdict: Ignore, Reason: ReasonOtherBootstrapToken, Message: "requested with a bootstrap token outside " + p.BootstrapGroup + ", not one of Carousel's"}
		}
		if p.IsCarouselToken == nil || !p.IsCarouselToken(tokenID) {
			return Decision{Verdict: Ignore, Reason: ReasonForeignToken, Message: "not requested with one of Carousel's bootstrap tokens", Retry: RetrySoon,
				UnknownToken: tokenID}
		}
		return Decision{Verdict: Approve, Reason: ReasonApproved, Message: "first bootstrap with a Carousel bootstrap token"}
	case req.Spec.Username == cn && slices.Contains(req.Spec.Groups, NodesGroup):
		return Decision{Verdict: Approve, Reason: ReasonApproved, Message: "node renewing its own client certificate"}
	case strings.HasPrefix(req.Spec.Username, NodeUserPrefix):
		return deny(ReasonIdentityMismatch, "node %q may not request a certificate for %q", req.Spec.Username, cn)
	}
	return Decision{Verdict: Ignore, Reason: "OtherRequester", Message: "requested by neither a Carousel bootstrap token nor the node itself"}
}

func decideServing(req *certificatesv1.CertificateSigningRequest, p Policy) Decision {
	if !p.AutoApproveServing {
		return Decision{Verdict: Ignore, Reason: "ManualApproval", Message: "serving CSRs are approved by an administrator unless the Cluster opts in"}
	}
	parsed, bad := validate(req)
	if bad != nil {
		return *bad
	}
	cn := parsed.Subject.CommonName
	switch {
	case req.Spec.Username == cn && slices.Contains(req.Spec.Groups, NodesGroup):
	case strings.HasPrefix(req.Spec.Username, NodeUserPrefix):
		return deny(ReasonIdentityMismatch, "only node %q itself may request its serving certificate", cn)
	default:
		// An administrator's or a provisioning tool's, to approve by hand.
		return Decision{Verdict: Ignore, Reason: "OtherRequester", Message: "requested by someone other than the node itself"}
	}
	node := strings.TrimPrefix(cn, NodeUserPrefix)
	info, ok := p.Node(node)
	if !ok {
		return Decision{Verdict: Ignore, Reason: ReasonUnknownNode, Message: fmt.Sprintf("node %q is not registered yet", node), Retry: RetrySoon}
	}
	if len(info.Addresses) == 0 {
		// Nothing to approve against (and nothing worth pinning) yet: the
		// kubelet or the cloud provider reports the addresses in a moment.
		return Decision{Verdict: Ignore, Reason: ReasonNodeWithoutAddresses, Message: fmt.Sprintf("node %q reports no addresses yet", node), Retry: RetrySoon}
	}
	var pinned *AddressPin
	if p.FirstSeenAddresses && p.Pinned != nil {
		var err error
		if pinned, err = p.Pinned(node); err != nil {
			return Decision{Verdict: Ignore, Reason: ReasonPinUnavailable, Message: fmt.Sprintf("the addresses pinned for node %q cannot be read", node), Retry: RetryWithBackoff}
		}
	}
	allowed, record := ServingAddresses(node, info, p.FirstSeenAddresses, pinned)
	what := "an address of node %q"
	if p.FirstSeenAddresses {
		what = "an address node %q had when Carousel first saw it and still has"
	}
	// A Node's addresses are as its kubelet or cloud provider wrote them:
	// an IP SAN is one of them when it is the same address, however written
	// (fd00::1 and fd00:0:0:0:0:0:0:1).
	isAllowedIP := func(ip net.IP) bool {
		return slices.ContainsFunc(allowed, func(a string) bool { return sameAddress(a, ip.String()) })
	}
	for _, san := range parsed.DNSNames {
		if !slices.Contains(allowed, san) {
			d := deny(ReasonUnexpectedSANs, "%q is not "+what, san, node)
			d.Pin = record
			return d
		}
	}
	for _, ip := range parsed.IPAddresses {
		if !isAllowedIP(ip) {
			d := deny(ReasonUnexpectedSANs, "%q is not "+what, ip.String(), node)
			d.Pin = record
			return d
		}
	}
	message := "every SAN is an address of the node"
	if p.FirstSeenAddresses {
		message = "every SAN is an address the node had when Carousel first saw it and still has"
	}
	return Decision{Verdict: Approve, Reason: ReasonApproved, Message: message, Pin: record}
}

// notAHostName says whether a DNS SAN is a wildcard or an IP address.
func notAHostName(name string) bool {
	return strings.Contains(name, "*") || net.ParseIP(name) != nil
}

// Validate says why a kubelet CSR must not be signed, whoever approved it:
// a subject, usage, SAN or key its signer does not issue. The signer checks
// it again, so that a manual approval cannot turn a kubelet signer into a
// source of cluster-admin or client-and-server certificates.
func Validate(req *certificatesv1.CertificateSigningRequest) error {
	if _, bad := validate(req); bad != nil {
		return fmt.Errorf("%s: %s", bad.Reason, bad.Message)
	}
	return nil
}

// validate parses the request and checks what its signer may issue; it
// returns the denial when a check fails.
func validate(req *certificatesv1.CertificateSigningRequest) (*x509.CertificateRequest, *Decision) {
	parsed, d := parse(req)
	if parsed == nil {
		return nil, &d
	}
	cn := parsed.Subject.CommonName
	var bad Decision
	switch req.Spec.SignerName {
	case certificatesv1.KubeAPIServerClientKubeletSignerName:
		switch {
		case !slices.Equal(parsed.Subject.Organization, []string{NodesGroup}):
			bad = deny(ReasonBadSubject, "the organization must be exactly %q, got %q", NodesGroup, parsed.Subject.Organization)
		case !strings.HasPrefix(cn, NodeUserPrefix) || len(cn) == len(NodeUserPrefix):
			bad = deny(ReasonBadSubject, "the common name must be %s<node name>, got %q", NodeUserPrefix, cn)
		case hasSANs(parsed):
			bad = deny(ReasonUnexpectedSANs, "a kubelet client certificate carries no subject alternative names")
		default:
			if msg := checkUsages(req.Spec.Usages, parsed, certificatesv1.UsageClientAuth); msg != "" {
				bad = deny(ReasonBadUsages, "%s", msg)
			}
		}
	case certificatesv1.KubeletServingSignerName:
		switch {
		case !slices.Equal(parsed.Subject.Organization, []string{NodesGroup}) || !strings.HasPrefix(cn, NodeUserPrefix) || len(cn) == len(NodeUserPrefix):
			bad = deny(ReasonBadSubject, "the subject must be O=%s, CN=%s<node name>", NodesGroup, NodeUserPrefix)
		case len(parsed.EmailAddresses) > 0 || len(parsed.URIs) > 0:
			bad = deny(ReasonUnexpectedSANs, "a kubelet serving certificate has only DNS and IP SANs")
		case len(parsed.DNSNames) == 0 && len(parsed.IPAddresses) == 0:
			bad = deny(ReasonUnexpectedSANs, "a kubelet serving certificate needs at least one DNS or IP SAN")
		case slices.ContainsFunc(parsed.DNSNames, notAHostName):
			// A kubelet asks for its host names as DNS SANs and its IPs as
			// IP SANs. A wildcard, even one its Node reports, would serve
			// as every matching node.
			bad = deny(ReasonUnexpectedSANs, "the DNS SANs of a kubelet serving certificate are host names: no wildcard, no IP address")
		default:
			if msg := checkUsages(req.Spec.Usages, parsed, certificatesv1.UsageServerAuth); msg != "" {
				bad = deny(ReasonBadUsages, "%s", msg)
			}
		}
	default:
		bad = deny(ReasonBadRequest, "signer %q is not a kubelet signer", req.Spec.SignerName)
	}
	if bad.Verdict == "" {
		if _, err := pki.AlgorithmOf(parsed.PublicKey); err != nil {
			bad = deny(ReasonUnsupportedKey, "%v", err)
		}
	}
	if bad.Verdict != "" {
		return nil, &bad
	}
	return parsed, nil
}

// parse decodes the PEM request and checks its signature.
func parse(req *certificatesv1.CertificateSigningRequest) (*x509.CertificateRequest, Decision) {
	parsed, err := pki.ParseCertificateRequest(req.Spec.Request)
	if err == nil {
		err = parsed.CheckSignature()
	}
	if err != nil {
		return nil, deny(ReasonBadRequest, "spec.request is not a valid certificate request: %v", err)
	}
	return parsed, Decision{}
}

// checkUsages requires the one extended usage and digital signature, as
// the upstream signers of these signer names do, allows key encipherment
// for RSA keys only (kubelets since 1.27 ask for it only then; upstream
// also takes it with other keys), and refuses everything else.
func checkUsages(usages []certificatesv1.KeyUsage, parsed *x509.CertificateRequest, required certificatesv1.KeyUsage) string {
	allowed := []certificatesv1.KeyUsage{required, certificatesv1.UsageDigitalSignature}
	if parsed.PublicKeyAlgorithm == x509.RSA {
		allowed = append(allowed, certificatesv1.UsageKeyEncipherment)
	}
	for _, u := range []certificatesv1.KeyUsage{required, certificatesv1.UsageDigitalSignature} {
		if !slices.Contains(usages, u) {
			return fmt.Sprintf("the usages must include %q", u)
		}
	}
	for _, u := range usages {
		if !slices.Contains(allowed, u) {
			return fmt.Sprintf("usage %q is not allowed; allowed: %v", u, allowed)
		}
	}
	return ""
}

func hasSANs(r *x509.CertificateRequest) bool {
	return len(r.DNSNames)+len(r.IPAddresses)+len(r.EmailAddresses)+len(r.URIs) > 0
}

func deny(reason, format string, args ...any) Decision {
	return Decision{Verdict: Deny, Reason: reason, Message: fmt.Sprintf(format, args...)}
}
