package csr

import (
	"crypto/x509"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// TestNext is the table of what the CSR controller does with a request: a
// decided request lives for an hour after its decision, a pending one for a
// day after its creation, and an approved one that is not signed yet is
// signed, however old, never deleted.
func TestNext(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	cond := func(typ certificatesv1.RequestConditionType, at time.Time) certificatesv1.CertificateSigningRequestCondition {
		return certificatesv1.CertificateSigningRequestCondition{Type: typ, LastUpdateTime: metav1.NewTime(at), LastTransitionTime: metav1.NewTime(at)}
	}
	withStatus := func(c certificatesv1.CertificateSigningRequestCondition, s corev1.ConditionStatus) certificatesv1.CertificateSigningRequestCondition {
		c.Status = s
		return c
	}
	approved := func(at time.Time) certificatesv1.CertificateSigningRequestCondition {
		return cond(certificatesv1.CertificateApproved, at)
	}
	ca, err := pki.NewCA(pki.CATemplate{CommonName: "ca", Validity: 48 * time.Hour}, key(t, pki.ECDSAP256), ago(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	issuedAt := func(at time.Time) []byte {
		kp, err := ca.IssueKeyPair(pki.LeafTemplate{CommonName: "system:node:worker-1", Validity: time.Hour,
			Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, pki.ECDSAP256, at)
		if err != nil {
			t.Fatal(err)
		}
		return kp.CertPEM()
	}
	tests := []struct {
		name       string
		created    time.Time
		conditions []certificatesv1.CertificateSigningRequestCondition
		cert       []byte
		want       Step
	}{
		{"new and pending: decide", ago(time.Minute), nil, nil, Step{ActionDecide, ago(time.Minute).Add(PendingLifetime)}},
		{"pending for 23 hours: decide", ago(23 * time.Hour), nil, nil, Step{ActionDecide, now.Add(time.Hour)}},
		{"pending for a day: delete", ago(PendingLifetime), nil, nil, Step{ActionDelete, now}},
		{"a condition of another type is no decision", ago(time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{cond("example.com/Reviewed", ago(time.Minute))}, nil, Step{ActionDecide, now.Add(23 * time.Hour)}},

		{"approved just now: sign", ago(time.Minute), []certificatesv1.CertificateSigningRequestCondition{approved(now)}, nil, Step{Action: ActionSign}},
		{"created yesterday, approved by an administrator this morning: sign", ago(20 * time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{approved(ago(time.Minute))}, nil, Step{Action: ActionSign}},
		{"approved 3 hours ago, during an outage: still sign", ago(4 * time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{approved(ago(3 * time.Hour))}, nil, Step{Action: ActionSign}},
		{"approved a week ago and never signed: still sign", ago(8 * 24 * time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{approved(ago(7 * 24 * time.Hour))}, nil, Step{Action: ActionSign}},

		{"issued right after approval: wait until an hour after the approval", ago(20 * time.Minute),
			[]certificatesv1.CertificateSigningRequestCondition{approved(ago(20 * time.Minute))}, issuedAt(ago(19 * time.Minute)), Step{ActionWait, now.Add(40 * time.Minute)}},
		{"created 20 hours ago, approved and issued 10 minutes ago: wait", ago(20 * time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{approved(ago(10 * time.Minute))}, issuedAt(ago(10 * time.Minute)), Step{ActionWait, now.Add(50 * time.Minute)}},
		{"approved 3 hours ago, signed just now after an outage: kept an hour from the certificate's start", ago(4 * time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{approved(ago(3 * time.Hour))}, issuedAt(now), Step{ActionWait, now.Add(time.Hour - pki.Backdate)}},
		{"issued and approved 61 minutes ago: delete", ago(2 * time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{approved(ago(61 * time.Minute))}, issuedAt(ago(2 * time.Hour)), Step{ActionDelete, now.Add(-time.Minute)}},
		{"issued with an unparsable certificate: from the approval", ago(2 * time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{approved(ago(30 * time.Minute))}, []byte("cert"), Step{ActionWait, now.Add(30 * time.Minute)}},

		{"created 3 hours ago, denied 20 minutes ago: wait", ago(3 * time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{cond(certificatesv1.CertificateDenied, ago(20*time.Minute))}, nil, Step{ActionWait, now.Add(40 * time.Minute)}},
		{"denied an hour ago: delete", ago(3 * time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{cond(certificatesv1.CertificateDenied, ago(time.Hour))}, nil, Step{ActionDelete, now}},
		{"approved 2 hours ago, failed 5 minutes ago: wait from the failure", ago(3 * time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{approved(ago(2 * time.Hour)), cond(certificatesv1.CertificateFailed, ago(5*time.Minute))}, nil,
			Step{ActionWait, now.Add(55 * time.Minute)}},
		{"approved, with a Failed condition that is False: sign", ago(time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{approved(ago(time.Minute)), withStatus(cond(certificatesv1.CertificateFailed, ago(time.Minute)), corev1.ConditionFalse)}, nil,
			Step{Action: ActionSign}},
		{"approved, with a Failed condition that is Unknown: sign", ago(time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{approved(ago(time.Minute)), withStatus(cond(certificatesv1.CertificateFailed, ago(time.Minute)), corev1.ConditionUnknown)}, nil,
			Step{Action: ActionSign}},
		{"failed 2 hours ago: delete", ago(3 * time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{approved(ago(2 * time.Hour)), cond(certificatesv1.CertificateFailed, ago(2*time.Hour))}, nil,
			Step{ActionDelete, now.Add(-time.Hour)}},

		{"a decision without timestamps counts from the creation", ago(30 * time.Minute),
			[]certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied}}, nil, Step{ActionWait, now.Add(30 * time.Minute)}},
		{"only a lastTransitionTime", ago(3 * time.Hour),
			[]certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied, LastTransitionTime: metav1.NewTime(ago(10 * time.Minute))}}, nil,
			Step{ActionWait, now.Add(50 * time.Minute)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &certificatesv1.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(tt.created)},
				Status:     certificatesv1.CertificateSigningRequestStatus{Conditions: tt.conditions, Certificate: tt.cert},
			}
			if got := Next(req, now); got.Action != tt.want.Action || !got.DeleteAt.Equal(tt.want.DeleteAt) {
				t.Fatalf("Next = %s until %s, want %s until %s", got.Action, got.DeleteAt, tt.want.Action, tt.want.DeleteAt)
			}
		})
	}
}
