package csr

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"math/big"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// fuzzConditionTypes are the condition types a fuzzed request carries:
// Next's three and two it must ignore.
var fuzzConditionTypes = []certificatesv1.RequestConditionType{
	certificatesv1.CertificateApproved, certificatesv1.CertificateDenied, certificatesv1.CertificateFailed,
	"example.com/Reviewed", "",
}

// fuzzFailedStatuses are the statuses a Failed condition may have.
var fuzzFailedStatuses = []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown, ""}

// fuzzConditions decodes conditions from raw, 10 bytes each (at most 6): a
// type, which of lastUpdateTime and lastTransitionTime are set, a Failed
// condition's status (any the API server takes; the others' is True), and their
// offsets from created in seconds (two signed 32-bit numbers, taken modulo
// 2^20: up to about 12 days either way, so that they straddle both
// lifetimes).
func fuzzConditions(raw []byte, created time.Time) []certificatesv1.CertificateSigningRequestCondition {
	var out []certificatesv1.CertificateSigningRequestCondition
	for len(raw) >= 10 && len(out) < 6 {
		c := certificatesv1.CertificateSigningRequestCondition{Type: fuzzConditionTypes[int(raw[0])%len(fuzzConditionTypes)], Status: "True"}
		upd := time.Duration(int32(binary.BigEndian.Uint32(raw[2:6]))%(1<<20)) * time.Second
		trans := time.Duration(int32(binary.BigEndian.Uint32(raw[6:10]))%(1<<20)) * time.Second
		if raw[1]&1 != 0 {
			c.LastUpdateTime = metav1.NewTime(created.Add(upd))
		}
		if raw[1]&2 != 0 {
			c.LastTransitionTime = metav1.NewTime(created.Add(trans))
		}
		if c.Type == certificatesv1.CertificateFailed {
			c.Status = fuzzFailedStatuses[int(raw[1]>>2)%len(fuzzFailedStatuses)]
		}
		out = append(out, c)
		raw = raw[10:]
	}
	return out
}

// FuzzNext checks the CSR lifecycle on any set of conditions, issued
// certificate and time:
//   - an approved request that is neither denied nor failed nor issued is
//     signed, whenever it is looked at, never deleted nor scheduled for it;
//   - nothing is deleted before its age counted from its decision passes the
//     limit: a denied or failed request lives DecidedLifetime after its
//     latest Denied or Failed condition, an issued one DecidedLifetime after
//     the later of its latest approval (its creation when it has none) and
//     the certificate's NotBefore, a pending one PendingLifetime after its
//     creation; a condition counts from its lastUpdateTime, else its
//     lastTransitionTime, else the creation;
//   - only a pending request is decided, only a finished one waits, and
//     Delete comes exactly when DeleteAt has come;
//   - DeleteAt does not depend on the time asked, so a deleted request stays
//     deleted at any later time; the order of the conditions and conditions
//     of other types change nothing; and Next is deterministic.
func FuzzNext(f *testing.F) {
	k, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		f.Fatal(err)
	}
	cond := func(typ uint8, flags uint8, upd, trans int32) []byte {
		b := make([]byte, 10)
		b[0], b[1] = typ, flags
		binary.BigEndian.PutUint32(b[2:6], uint32(upd))
		binary.BigEndian.PutUint32(b[6:10], uint32(trans))
		return b
	}
	const hour, day = 3600, 24 * 3600
	add := func(createdSec int64, conds []byte, certMode uint8, certStart, nowSec, laterSec int64) {
		f.Add(createdSec, conds, certMode, certStart, nowSec, laterSec)
	}
	// Arguments: the creation in seconds after 2026-01-01, conditions (see
	// fuzzConditions), the certificate (0: none, 1: not PEM, 2: a certificate
	// starting certStart seconds after the creation), and now and a later
	// time, in seconds after the creation.
	add(0, nil, 0, 0, 60, day)
	add(0, nil, 0, 0, day-1, day)
	add(0, cond(0, 3, 20*hour, 20*hour), 0, 0, 20*hour+60, 30*day)                   // approved late, never signed
	add(0, cond(0, 0, 0, 0), 0, 0, 8*day, 9*day)                                     // approved without timestamps
	add(0, cond(0, 3, 600, 600), 2, 600, 3600, 4000)                                 // issued right after approval
	add(0, cond(0, 3, 600, 600), 2, 3*hour, 3*hour, 5*hour)                          // signed late
	add(0, cond(0, 3, 600, 600), 1, 0, 3600, 2*hour)                                 // unparsable certificate
	add(0, nil, 2, 0, 600, 2*hour)                                                   // issued without an approval
	add(0, cond(1, 3, 1200, 1200), 0, 0, 3600, 2*hour)                               // denied
	add(0, append(cond(0, 3, 60, 60), cond(2, 1, 7200, 0)...), 0, 0, 3*hour, 4*hour) // approved, then failed
	add(0, append(cond(0, 3, 60, 60), cond(1, 2, 0, 300)...), 2, 0, 1800, 7200)      // approved and denied, issued
	add(0, cond(3, 3, 60, 60), 0, 0, 3600, 2*day)                                    // a condition of another type
	add(0, cond(1, 1, -7200, 0), 0, 0, 0, 3600)                                      // a decision dated before the creation
	add(-5*365*day, cond(0, 3, 60, 60), 0, 0, 10*365*day, 20*365*day)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, createdSec int64, rawConds []byte, certMode uint8, certStart, nowSec, laterSec int64) {
		// Times within a century of 2026; now and later within 50 years of the creation.
		const century, fifty = 100 * 365 * 24 * 3600, 50 * 365 * 24 * 3600
		created := base.Add(time.Duration(createdSec%century) * time.Second)
		now := created.Add(time.Duration(nowSec%fifty) * time.Second)
		later := now.Add(time.Duration(abs64(laterSec%fifty)) * time.Second)
		conds := fuzzConditions(rawConds, created)
		req := &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
			Status:     certificatesv1.CertificateSigningRequestStatus{Conditions: conds},
		}
		var notBefore time.Time
		switch certMode % 3 {
		case 1:
			req.Status.Certificate = []byte("not a certificate")
		case 2:
			notBefore = created.Add(time.Duration(certStart%fifty) * time.Second)
			tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "system:node:worker-1"},
				NotBefore: notBefore, NotAfter: notBefore.Add(time.Hour)}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
			if err != nil {
				t.Fatal(err)
			}
			req.Status.Certificate = pki.EncodeCertificates(&x509.Certificate{Raw: der})
			// NotBefore as the certificate carries it: whole seconds.
			notBefore = notBefore.Truncate(time.Second)
		}

		step := Next(req, now)
		if again := Next(req, now); !sameStep(again, step) {
			t.Fatalf("not deterministic: %+v, then %+v", step, again)
		}

		at := func(c certificatesv1.CertificateSigningRequestCondition) time.Time { return conditionTime(c, created) }
		var approved, ended []time.Time
		for _, c := range conds {
			// A Failed condition that is False or Unknown says the request did not fail.
			notFailed := c.Type == certificatesv1.CertificateFailed && (c.Status == corev1.ConditionFalse || c.Status == corev1.ConditionUnknown)
			switch {
			case c.Type == certificatesv1.CertificateApproved:
				approved = append(approved, at(c))
			case (c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed) && !notFailed:
				ended = append(ended, at(c))
			}
		}
		issued := len(req.Status.Certificate) > 0
		latest := func(ts []time.Time) time.Time {
			return slices.MaxFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		}

		var want time.Time // DeleteAt
		switch {
		case len(ended) > 0:
			want = latest(ended).Add(DecidedLifetime)
		case issued:
			from := created
			if len(approved) > 0 {
				from = latest(approved)
			}
			if !notBefore.IsZero() && notBefore.After(from) {
				from = notBefore
			}
			want = from.Add(DecidedLifetime)
		case len(approved) > 0:
			// Approved, unsigned, neither denied nor failed: it can still be
			// signed, and is, at any time.
			for _, when := range []time.Time{now, later, created.Add(100 * 365 * 24 * time.Hour)} {
				if s := Next(req, when); s.Action != ActionSign || !s.DeleteAt.IsZero() {
					t.Fatalf("an approved request still to be signed: %s until %s at %s, want Sign", s.Action, s.DeleteAt, when)
				}
			}
			return
		default:
			want = created.Add(PendingLifetime)
		}
		if !step.DeleteAt.Equal(want) {
			t.Fatalf("DeleteAt %s, want %s (created %s, approved %v, ended %v, certificate from %s)", step.DeleteAt, want, created, approved, ended, notBefore)
		}
		due := !now.Before(want)
		switch step.Action {
		case ActionDelete:
			if !due {
				t.Fatalf("deleted at %s, before %s", now, want)
			}
		case ActionDecide:
			if due || len(ended) > 0 || issued || len(approved) > 0 {
				t.Fatalf("Decide at %s until %s for a request that is decided, issued or due", now, want)
			}
		case ActionWait:
			if due || len(ended) == 0 && !issued {
				t.Fatalf("Wait at %s until %s for a request that is pending or due", now, want)
			}
		default:
			t.Fatalf("%s for a request that is not approved and unsigned", step.Action)
		}

		// The same DeleteAt at any later time, deleted once it has come.
		next := Next(req, later)
		if !next.DeleteAt.Equal(step.DeleteAt) || step.Action == ActionDelete && next.Action != ActionDelete {
			t.Fatalf("%+v at %s, then %+v at %s", step, now, next, later)
		}

		// Reversed, and with conditions of other types, nothing changes.
		other := req.DeepCopy()
		slices.Reverse(other.Status.Conditions)
		other.Status.Conditions = append(other.Status.Conditions,
			certificatesv1.CertificateSigningRequestCondition{Type: "example.com/Reviewed", LastUpdateTime: metav1.NewTime(now)})
		if s := Next(other, now); !sameStep(s, step) {
			t.Fatalf("reordered conditions: %+v, want %+v", s, step)
		}
	})
}

func sameStep(a, b Step) bool { return a.Action == b.Action && a.DeleteAt.Equal(b.DeleteAt) }

func abs64(d int64) int64 {
	if d < 0 {
		return -d
	}
	return d
}
