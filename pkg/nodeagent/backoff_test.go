package nodeagent

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestRetriesAreJittered plays, for each retry policy of the agent, two
// agents that failed together: their delays differ, each lies between the
// policy's exponential delay and that much plus its jitter, and they grow up
// to the cap.
func TestRetriesAreJittered(t *testing.T) {
	for name, p := range map[string]wait.Backoff{
		"certificate": certificateBackoff, "register": registerBackoff, "renewal": renewalBackoff, "refused renewal": refusedRenewalBackoff,
		"kubelet": kubeletBackoff,
	} {
		t.Run(name, func(t *testing.T) {
			a, b := newBackoff(p), newBackoff(p)
			base := p.Duration
			for retry := range 12 {
				da, db := a.next(), b.next()
				if da == db {
					t.Errorf("retry %d: both agents wait %s", retry, da)
				}
				for _, d := range []time.Duration{da, db} {
					if d < base || d > base+time.Duration(float64(base)*p.Jitter) {
						t.Errorf("retry %d: delay %s outside [%s, %s·(1+%v)]", retry, d, base, base, p.Jitter)
					}
				}
				base = min(time.Duration(float64(base)*p.Factor), p.Cap)
			}
			a.reset()
			if d := a.next(); d > longestFirstDelay(p) {
				t.Errorf("after reset the delay is %s, want the first one again", d)
			}
		})
	}
}

// longestFirstDelay is the longest delay before the first retry under p:
// its Duration stretched by all of its Jitter. Tests step fake clocks by it.
func longestFirstDelay(p wait.Backoff) time.Duration {
	return p.Duration + time.Duration(float64(p.Duration)*p.Jitter)
}

// A request refused for good (its CSR denied or failed, or the certificate
// it brought refused by the agent) waits the refused delay, a minute at
// first; any other failure the retry delay, a second at first. Only the
// backoff whose delay is returned advances.
func TestAfterFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		refused bool
	}{
		{"denied", fmt.Errorf("CSR c %w: Policy: no", ErrDenied), true},
		{"failed", fmt.Errorf("CSR c %w: SignerError: no", ErrFailed), true},
		{"the issued certificate refused", fmt.Errorf("renewing: %w", issuedRefusal{errors.New("the issued certificate is for someone else")}), true},
		{"the API server down", errors.New("connection refused"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			retry, refused := newBackoff(renewalBackoff), newBackoff(refusedRenewalBackoff)
			got := afterFailure(tc.err, retry, refused)
			first, untouched := renewalBackoff, refused
			if tc.refused {
				first, untouched = refusedRenewalBackoff, retry
			}
			if got < first.Duration || got > time.Duration(float64(first.Duration)*(1+first.Jitter)) {
				t.Errorf("afterFailure = %s, want the first delay of %s", got, first.Duration)
			}
			if untouched.current != untouched.policy {
				t.Error("the other backoff advanced")
			}
		})
	}
}
