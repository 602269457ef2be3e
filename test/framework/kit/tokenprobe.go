package kit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/carousel-dev/carousel/pkg/evidence"
)

// TokenProbe does what a pod does with its service-account token, over and
// over: it has a token minted (TokenRequest, as the kubelet asks for one)
// and authenticates with it. It counts the tokens used and names, with the
// key ID that signed them, those the API server rejected (401); any other
// error is an API server out of reach, which it leaves to the probes of
// availability.
type TokenProbe struct {
	Mint     func(context.Context) (string, error)
	Use      func(ctx context.Context, token string) error
	Interval time.Duration

	used     atomic.Int64
	mu       sync.Mutex
	rejected []string
}

// Run probes until ctx is done.
func (p *TokenProbe) Run(ctx context.Context) {
	for ctx.Err() == nil {
		token, err := p.Mint(ctx)
		if err == nil {
			err = p.Use(ctx, token)
		}
		switch {
		case apierrors.IsUnauthorized(err):
			p.mu.Lock()
			p.rejected = append(p.rejected, time.Now().Format("15:04:05.000 ")+evidence.TokenKeyID([]byte(token))+": "+err.Error())
			p.mu.Unlock()
		case err == nil:
			p.used.Add(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(p.Interval):
		}
	}
}

// Used is how many tokens were minted and accepted.
func (p *TokenProbe) Used() int64 { return p.used.Load() }

// Rejected names the tokens the API server rejected: when, and the key ID.
func (p *TokenProbe) Rejected() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.rejected...)
}
