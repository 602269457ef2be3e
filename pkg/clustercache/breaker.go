package clustercache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// ErrNotAnswering means the managed API server left a request of the
// connection's direct client unanswered (no response in time, or a 5xx) and
// has not answered a probe since: the client's requests fail at once, without
// reaching it, until probeInterval after the probe.
var ErrNotAnswering = errors.New("the managed API server is not answering")

// probeInterval is how long after a failed probe the direct client's
// requests fail without another.
const probeInterval = 10 * time.Second

// probePath is what a probe reads: a read that needs the API server's
// storage, as the controllers' requests do (/version and /readyz answer
// without it, or for reasons of their own).
const probePath = "/api/v1/namespaces/kube-system"

// breaker is the direct client's transport: once the managed API server left
// a request unanswered, the next request waits for a probe, one at a time,
// and fails at once with ErrNotAnswering while the last probe, less than
// probeInterval ago, went unanswered too. A managed API server whose storage
// hangs (etcd without quorum) then holds each pass of a controller that
// reaches it for a probe at most, then not at all, instead of each request's
// full timeout, and the workers shared by every managed cluster stay free for
// the others. What it lets through is the caller's to time out.
type breaker struct {
	next         http.RoundTripper
	host         string // the API server's URL, which probes read
	clock        clock.PassiveClock
	probeTimeout time.Duration
	probing      chan struct{} // held by the request that probes

	mu            sync.Mutex
	unanswered    bool      // the last request, or probe, was not answered
	probeFailedAt time.Time // zero unless the last probe was not answered
	answers       uint64    // round trips answered so far
}

func newBreaker(next http.RoundTripper, host string, clk clock.PassiveClock, probeTimeout time.Duration) *breaker {
	return &breaker{next: next, host: strings.TrimSuffix(host, "/"), clock: clk, probeTimeout: probeTimeout, probing: make(chan struct{}, 1)}
}

// RoundTrip implements http.RoundTripper.
func (b *breaker) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := b.admit(req.Context()); err != nil {
		return nil, err
	}
	resp, err := b.next.RoundTrip(req)
	b.record(resp, err)
	return resp, err
}

// answered says whether a round trip got an answer from the API server that
// is not about itself failing; a request its caller cancelled says nothing.
func answered(resp *http.Response, err error) (answer, known bool) {
	switch {
	case errors.Is(err, context.Canceled):
		return false, false
	case err != nil:
		return false, true
	}
	return resp.StatusCode < http.StatusInternalServerError, true
}

func (b *breaker) record(resp *http.Response, err error) {
	answer, known := answered(resp, err)
	if !known {
		return
	}
	b.mu.Lock()
	b.unanswered = !answer
	if answer {
		b.probeFailedAt = time.Time{}
		b.answers++
	}
	b.mu.Unlock()
}

// state is whether the API server left the last request unanswered, and when
// the last probe failed.
func (b *breaker) state() (unanswered bool, probeFailedAt time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unanswered, b.probeFailedAt
}

// admit returns nil when a request may go to the API server: it answered the
// last one, or answers a probe now.
func (b *breaker) admit(ctx context.Context) error {
	if unanswered, _ := b.state(); !unanswered {
		return nil
	}
	select {
	case b.probing <- struct{}{}:
		defer func() { <-b.probing }()
	case <-ctx.Done():
		return ctx.Err()
	}
	// Whoever held the turn may have probed.
	unanswered, failedAt := b.state()
	switch {
	case !unanswered:
		return nil
	case !failedAt.IsZero() && b.clock.Since(failedAt) < probeInterval:
		return fmt.Errorf("%w at %s: a probe %s ago was not answered either", ErrNotAnswering, b.host,
			b.clock.Since(failedAt).Round(time.Second))
	}
	b.mu.Lock()
	answers := b.answers
	b.mu.Unlock()
	err := b.probe(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(ctx.Err(), context.Canceled): // the caller's end, not the API server's
		return ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.answers != answers {
		// A request in flight was answered meanwhile: the API server
		// answers after all.
		return nil
	}
	b.unanswered, b.probeFailedAt = true, b.clock.Now()
	return fmt.Errorf("%w at %s: %w", ErrNotAnswering, b.host, err)
}

// probe reads probePath, within probeTimeout; an answer is recorded, a
// failure is admit's to record.
func (b *breaker) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.host+probePath, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := b.next.RoundTrip(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if answer, _ := answered(resp, nil); !answer {
		return fmt.Errorf("a probe was answered %s", resp.Status)
	}
	b.record(resp, nil)
	return nil
}
