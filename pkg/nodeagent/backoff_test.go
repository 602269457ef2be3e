package nodeagent

import (
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestRetryDelay(t *testing.T) {
	p := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.5, Cap: 5 * time.Minute}
	for _, tt := range []struct {
		retry int
		r     float64
		want  time.Duration
	}{
		{0, 0, time.Second},
		{0, 0.5, 1250 * time.Millisecond},
		{0, 1, 1500 * time.Millisecond},
		{1, 0, 2 * time.Second},
		{3, 0.5, 10 * time.Second},
		{8, 0, 256 * time.Second},
		{9, 0, 5 * time.Minute},
		{9, 1, 7*time.Minute + 30*time.Second},
		{1000, 0.5, 6*time.Minute + 15*time.Second},
	} {
		if got := retryDelay(p, tt.retry, tt.r); got != tt.want {
			t.Errorf("retry %d, r %v: delay %s, want %s", tt.retry, tt.r, got, tt.want)
		}
	}
}

// TestRetriesAreJittered plays, for each retry policy of the agent, two
// agents that failed together: their delays differ, each lies between the
// policy's exponential delay and that much plus its jitter, and they grow up
// to the cap.
func TestRetriesAreJittered(t *testing.T) {
	for name, p := range map[string]wait.Backoff{
		"certificate": certificateBackoff, "register": registerBackoff, "renewal": renewalBackoff,
	} {
		t.Run(name, func(t *testing.T) {
			a, b := newBackoff(p), newBackoff(p)
			a.rand = rand.New(rand.NewPCG(1, 1)).Float64
			b.rand = rand.New(rand.NewPCG(2, 2)).Float64
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
			if d := a.next(); d > p.Duration+time.Duration(float64(p.Duration)*p.Jitter) {
				t.Errorf("after reset the delay is %s, want the first one again", d)
			}
		})
	}
}
