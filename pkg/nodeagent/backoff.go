package nodeagent

import (
	"math"
	"math/rand/v2"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// retryJitter is the Jitter of every retry policy: each delay is stretched by
// a random 0-50% of itself, so that agents that failed together (an API
// server outage) do not retry together.
const retryJitter = 0.5

// Retry policies of the agent's loops. Steps is not used: the loops retry
// until their context ends, and the delay stays at Cap (jittered) once there.
var (
	// certificateBackoff spaces the attempts to obtain a certificate: at
	// start (bootstrap) and for a rotation.
	certificateBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: retryJitter, Cap: 5 * time.Minute}
	// registerBackoff spaces the attempts to register the Node.
	registerBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: retryJitter, Cap: 10 * time.Second}
	// renewalBackoff spaces the attempts at an in-place renewal Carousel
	// requested, and the attempts to watch the Node for such requests.
	renewalBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: retryJitter, Cap: time.Minute}
	// kubeletBackoff spaces the looks for the kubelet's credentials at
	// start, and for the kubelet's health and serving certificate after the
	// agent restarted it.
	kubeletBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: retryJitter, Cap: 10 * time.Second}
)

// retryDelay is the delay before retry n (0 for the first retry) under
// policy p, for r in [0, 1): p.Duration·p.Factor^n, at most p.Cap, stretched
// by r·p.Jitter of itself. These are the delays wait.Backoff.Step returns
// (given enough Steps), with the random draw made explicit. p needs a Cap
// for n to grow without bound, as all the agent's policies have.
func retryDelay(p wait.Backoff, n int, r float64) time.Duration {
	d := float64(p.Duration)
	if p.Factor > 1 {
		d *= math.Pow(p.Factor, float64(n))
	}
	if p.Cap > 0 {
		d = min(d, float64(p.Cap))
	}
	return time.Duration(d * (1 + p.Jitter*r))
}

// backoff counts consecutive failures of one loop and returns the jittered
// delay before the next attempt.
type backoff struct {
	policy   wait.Backoff
	failures int
	rand     func() float64
}

func newBackoff(p wait.Backoff) *backoff { return &backoff{policy: p, rand: rand.Float64} }

// next returns the delay before the next attempt and counts a failure.
func (b *backoff) next() time.Duration {
	d := retryDelay(b.policy, b.failures, b.rand())
	b.failures++
	return d
}

// reset starts over from the policy's first delay, after a success.
func (b *backoff) reset() { b.failures = 0 }
