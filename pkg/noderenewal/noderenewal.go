// Package noderenewal is the protocol of an in-place worker rollout, carried
// in annotations on a managed cluster's Node. Carousel asks a node to renew
// its credentials for one phase of a rotation (a Request); the node agent
// fetches the current trust bundles (the cluster's, for the API server, and
// the kubelet's, for the clients of the kubelet), installs them, renews its
// client certificate and answers with what it now has (a Report); Carousel
// compares that with what it expects (Assess). Both ends use this package, so the wire format is
// defined once.
package noderenewal

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// Request asks a node to renew its credentials for one phase of a rotation.
// A node carries out each request once.
type Request struct {
	// Initiated is when the rotation started (its lastInitiationTime).
	Initiated time.Time
	Phase     v1alpha1.CARotationPhase
}

// RequestFor is the request of the rotation's current phase. An abort rolls
// in-place pools once, back to the old credentials and to trusting only the
// old CAs; a pool still pending once that is recorded (abortRolledBackTime)
// rolls a second time, and that request carries the record's time instead
// of the rotation's start.
func RequestFor(rot *v1alpha1.CARotation) Request {
	r := Request{Phase: rot.Phase}
	switch {
	case rot.Phase == v1alpha1.RotationAborting && rot.AbortRolledBackTime != nil:
		r.Initiated = rot.AbortRolledBackTime.Time
	case rot.LastInitiationTime != nil:
		r.Initiated = rot.LastInitiationTime.Time
	}
	return r
}

// IsZero says whether r is no request: that of a report no request asked for.
func (r Request) IsZero() bool { return r.Initiated.IsZero() && r.Phase == "" }

// String is the request as an annotation value: <initiated, RFC 3339 UTC>/<phase>.
func (r Request) String() string {
	return r.Initiated.UTC().Format(time.RFC3339) + "/" + string(r.Phase)
}

// ParseRequest parses an annotation value written by Request.String.
func ParseRequest(value string) (Request, error) {
	at, phase, ok := strings.Cut(value, "/")
	if !ok {
		return Request{}, fmt.Errorf("renewal request %q: want <time>/<phase>", value)
	}
	initiated, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return Request{}, fmt.Errorf("renewal request %q: %w", value, err)
	}
	r := Request{Initiated: initiated.UTC(), Phase: v1alpha1.CARotationPhase(phase)}
	if r.Phase != v1alpha1.RotationPreparing && r.Phase != v1alpha1.RotationFinalizing && r.Phase != v1alpha1.RotationAborting {
		return Request{}, fmt.Errorf("renewal request %q: %q is not a phase that rolls workers", value, phase)
	}
	if r.String() != value {
		return Request{}, fmt.Errorf("renewal request %q is not in canonical form %q", value, r.String())
	}
	return r, nil
}

// Trust is the pair of trust bundles a node uses, as PEM.
type Trust struct {
	// Cluster verifies the API server: the certificate-authority of the
	// kubelet's kubeconfigs.
	Cluster []byte
	// Kubelet verifies the clients of the kubelet (the API server's kubelet
	// client certificate): the kubelet's authentication.x509.clientCAFile.
	Kubelet []byte
}

// Report is what a node answers once it carried out a request.
type Report struct {
	Request Request
	// Issuer is the hex key identifier of the CA that signed the node's
	// client certificate.
	Issuer string
	// Bundle is the hex SHA-256 of the cluster trust bundle the node now uses.
	Bundle string
	// KubeletBundle is the hex SHA-256 of the kubelet trust bundle the node
	// now uses.
	KubeletBundle string
	// ServingIssuer is the hex key identifier of the CA that signed the
	// kubelet's serving certificate; empty for a node whose kubelet serves no
	// certificate Carousel signs (the agent's stand-in mode).
	ServingIssuer string
}

// ReportOf is the report of a node that renewed for req: its client
// certificate, its kubelet's serving certificate (nil when it has none
// Carousel signs) and the trust bundles it uses.
func ReportOf(req Request, clientCert, servingCert *x509.Certificate, trust Trust) Report {
	r := Report{Request: req, Issuer: hex.EncodeToString(clientCert.AuthorityKeyId),
		Bundle: Digest(trust.Cluster), KubeletBundle: Digest(trust.Kubelet)}
	if servingCert != nil {
		r.ServingIssuer = hex.EncodeToString(servingCert.AuthorityKeyId)
	}
	return r
}

// Expected is the report Carousel waits for: a client certificate signed by
// clientCA, a serving certificate (if any) signed by kubeletCA, and the
// trust bundles of trust.
func Expected(req Request, clientCA, kubeletCA *x509.Certificate, trust Trust) Report {
	return Report{Request: req, Issuer: hex.EncodeToString(clientCA.SubjectKeyId), ServingIssuer: hex.EncodeToString(kubeletCA.SubjectKeyId),
		Bundle: Digest(trust.Cluster), KubeletBundle: Digest(trust.Kubelet)}
}

// Digest is how a report names a trust bundle: the hex SHA-256 of its bytes.
func Digest(bundle []byte) string {
	sum := sha256.Sum256(bundle)
	return hex.EncodeToString(sum[:])
}

// Annotations are the Node annotations that carry the report. A report
// with no request (the zero Request: a node brought in line without being
// asked, as after a re-bootstrap) says what the node uses and answers no
// request: it leaves the answer annotation out, so that a request pending
// on the Node stays pending.
func (r Report) Annotations() map[string]string {
	a := map[string]string{
		v1alpha1.AnnotationClientCertificateIssuer:  r.Issuer,
		v1alpha1.AnnotationTrustBundle:              r.Bundle,
		v1alpha1.AnnotationKubeletTrustBundle:       r.KubeletBundle,
		v1alpha1.AnnotationServingCertificateIssuer: r.ServingIssuer,
	}
	if !r.Request.IsZero() {
		a[v1alpha1.AnnotationCredentialsRenewed] = r.Request.String()
	}
	return a
}

// Pending returns the request a node has been asked to carry out and has not
// answered yet. A request that does not parse is not carried out: Carousel
// writes it again.
func Pending(annotations map[string]string) (Request, bool) {
	value := annotations[v1alpha1.AnnotationRenewCredentials]
	req, err := ParseRequest(value)
	if err != nil || annotations[v1alpha1.AnnotationCredentialsRenewed] == value {
		return Request{}, false
	}
	return req, true
}

// Action is what Carousel does about one node.
type Action int

const (
	// Wait means the node was asked and has not answered yet.
	Wait Action = iota
	// Done means the node answered the request with the expected credentials.
	Done
	// Ask means: set the request on the node.
	Ask
	// AskAgain means the node answered with other credentials than expected (it
	// read trust bundles not yet updated, or an agent that does not report the
	// kubelet bundle answered): remove its answer so that it carries the
	// request out again.
	AskAgain
)

func (a Action) String() string {
	return [...]string{"Wait", "Done", "Ask", "AskAgain"}[a]
}

// Annotate returns a Node's annotations after Carousel's side of action for
// req: Ask sets the request, AskAgain removes the node's answer so that it
// carries the request out again; Done and Wait change nothing.
func Annotate(annotations map[string]string, action Action, req Request) map[string]string {
	switch action {
	case Ask:
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[v1alpha1.AnnotationRenewCredentials] = req.String()
	case AskAgain:
		delete(annotations, v1alpha1.AnnotationCredentialsRenewed)
	}
	return annotations
}

// Assess decides what to do about a node whose annotations are these, when
// Carousel expects want.
func Assess(annotations map[string]string, want Report) Action {
	request := want.Request.String()
	switch {
	case annotations[v1alpha1.AnnotationCredentialsRenewed] == request:
		serving := annotations[v1alpha1.AnnotationServingCertificateIssuer]
		if annotations[v1alpha1.AnnotationClientCertificateIssuer] == want.Issuer &&
			(serving == "" || serving == want.ServingIssuer) &&
			annotations[v1alpha1.AnnotationTrustBundle] == want.Bundle &&
			annotations[v1alpha1.AnnotationKubeletTrustBundle] == want.KubeletBundle {
			return Done
		}
		return AskAgain
	case annotations[v1alpha1.AnnotationRenewCredentials] != request:
		return Ask
	}
	return Wait
}
