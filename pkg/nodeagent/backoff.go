package nodeagent

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// retryJitter is the Jitter of every retry policy: each delay is stretched by
// a random 0-50% of itself, so that agents that failed together (an API
// server outage) do not retry together.
const retryJitter = 0.5

// Retry policies of the agent's loops (newBackoff sets Steps).
var (
	// certificateBackoff spaces the attempts to obtain a certificate: at
	// start (bootstrap) and for a rotation.
	certificateBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: retryJitter, Cap: 5 * time.Minute}
	// registerBackoff spaces the attempts to register the Node.
	registerBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: retryJitter, Cap: 10 * time.Second}
	// renewalBackoff spaces the attempts at an in-place renewal Carousel
	// requested, and the attempts to watch the Node for such requests.
	renewalBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: retryJitter, Cap: time.Minute}
	// refusedRenewalBackoff spaces the attempts at an in-place renewal
	// whose CSR was denied or failed: the approver's answer is final for
	// that request, and the next attempt asks again with a new key, so a
	// refusal that lasts (a node whose addresses the serving CSR policy
	// refuses) would otherwise have every node create a CSR a minute.
	refusedRenewalBackoff = wait.Backoff{Duration: time.Minute, Factor: 2, Jitter: retryJitter, Cap: 15 * time.Minute}
	// kubeletBackoff spaces the looks for the kubelet's credentials at
	// start, and for the kubelet's health and serving certificate after the
	// agent restarted it.
	kubeletBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: retryJitter, Cap: 10 * time.Second}
)

// backoff is the retry delays of one loop: wait.Backoff.Step of the loop's
// policy, which grows each delay by Factor up to Cap and stretches it by a
// random 0 to Jitter of itself; a success starts over from the first delay.
type backoff struct {
	policy, current wait.Backoff
}

// newBackoff steps through p without end: the delay stays at p.Cap
// (jittered) once there, as the loops retry until their context ends.
func newBackoff(p wait.Backoff) *backoff {
	p.Steps = math.MaxInt32
	return &backoff{policy: p, current: p}
}

// next returns the delay before the next attempt, after a failure.
func (b *backoff) next() time.Duration { return b.current.Step() }

// reset starts over from the policy's first delay, after a success.
func (b *backoff) reset() { b.current = b.policy }

// afterFailure is how long to wait before an attempt that failed with err is
// made again: refused's delay when a certificate request was denied or
// failed, or its certificate refused (refusedRequest: asked again at once, it
// would be refused again), else retry's.
// Only the backoff whose delay it returns advances.
func afterFailure(err error, retry, refused *backoff) time.Duration {
	if refusedRequest(err) {
		return refused.next()
	}
	return retry.next()
}
