package csr

import (
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// How long CSRs are kept, as kube-controller-manager's csrcleaner keeps them:
// a decided or issued request for an hour after its decision, a pending one
// for a day after its creation.
const (
	DecidedLifetime = time.Hour
	PendingLifetime = 24 * time.Hour
)

// Action is what the CSR controller does with a request now.
type Action string

const (
	// ActionDecide approves, denies or leaves pending a request without a decision.
	ActionDecide Action = "Decide"
	// ActionSign issues the certificate of an approved request.
	ActionSign Action = "Sign"
	// ActionWait leaves a finished (issued, denied or failed) request alone until DeleteAt.
	ActionWait Action = "Wait"
	// ActionDelete deletes a request whose time is up.
	ActionDelete Action = "Delete"
)

// Step is the Action for a request now and when the request is to be
// deleted unless it changes first. DeleteAt is zero for an approved request
// still to be signed: that one is never deleted, however late it was
// approved, until it is signed or marked Failed.
type Step struct {
	Action   Action
	DeleteAt time.Time
}

// Next says what to do with a kubelet CSR at now. The lifetime of a decided
// request counts from its decision (the Denied or Failed condition, or for an
// issued certificate the later of its approval and the certificate's
// NotBefore), not from its creation: a request an administrator approves the
// next morning, or one approved while Carousel was down, is signed rather
// than deleted.
func Next(req *certificatesv1.CertificateSigningRequest, now time.Time) Step {
	created := req.CreationTimestamp.Time
	var approved, ended bool
	var approvedAt, endedAt time.Time
	for _, c := range req.Status.Conditions {
		at := conditionTime(c, created)
		switch {
		case c.Type == certificatesv1.CertificateApproved:
			approved, approvedAt = true, later(approvedAt, at)
		case c.Type == certificatesv1.CertificateDenied, Failed(c):
			ended, endedAt = true, later(endedAt, at)
		}
	}
	var deleteAt time.Time
	switch {
	case ended:
		deleteAt = endedAt.Add(DecidedLifetime)
	case len(req.Status.Certificate) > 0:
		issuedAt := created
		if approved {
			issuedAt = approvedAt
		}
		if certs, err := pki.ParseCertificates(req.Status.Certificate); err == nil {
			issuedAt = later(issuedAt, certs[0].NotBefore)
		}
		deleteAt = issuedAt.Add(DecidedLifetime)
	case approved:
		return Step{Action: ActionSign}
	default:
		deleteAt = created.Add(PendingLifetime)
		if now.Before(deleteAt) {
			return Step{Action: ActionDecide, DeleteAt: deleteAt}
		}
	}
	if now.Before(deleteAt) {
		return Step{Action: ActionWait, DeleteAt: deleteAt}
	}
	return Step{Action: ActionDelete, DeleteAt: deleteAt}
}

// conditionTime is when a condition was last set: its lastUpdateTime, which
// the API server fills in when the writer does not, else its
// lastTransitionTime, else (for objects written without either) the
// request's creation.
func conditionTime(c certificatesv1.CertificateSigningRequestCondition, created time.Time) time.Time {
	switch {
	case !c.LastUpdateTime.IsZero():
		return c.LastUpdateTime.Time
	case !c.LastTransitionTime.IsZero():
		return c.LastTransitionTime.Time
	}
	return created
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
