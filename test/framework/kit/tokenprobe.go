package kit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/carousel-dev/carousel/pkg/evidence"
)

// TokenProbe does what pods do with their service-account tokens, over and
// over: it has a token minted (TokenRequest, as the kubelet asks for one)
// and authenticates with it, and authenticates again with each token it
// holds from before (as a pod does until its token is refreshed). It counts
// the tokens used and names, with the key ID that signed them, those the API
// server rejected (401); any other error is an API server out of reach,
// which it leaves to the probes of availability.
type TokenProbe struct {
	Mint     func(context.Context) (string, error)
	Use      func(ctx context.Context, token string) error
	Held     []string
	Interval time.Duration

	used     atomic.Int64
	heldUsed atomic.Int64
	mu       sync.Mutex
	rejected []string
}

// Run probes until ctx is done.
func (p *TokenProbe) Run(ctx context.Context) {
	for ctx.Err() == nil {
		token, err := p.Mint(ctx)
		if err == nil {
			p.use(ctx, token, "minted", &p.used)
		}
		for _, token := range p.Held {
			p.use(ctx, token, "held", &p.heldUsed)
		}
		select {
		case <-ctx.Done():
		case <-time.After(p.Interval):
		}
	}
}

func (p *TokenProbe) use(ctx context.Context, token, kind string, accepted *atomic.Int64) {
	switch err := p.Use(ctx, token); {
	case apierrors.IsUnauthorized(err):
		p.mu.Lock()
		p.rejected = append(p.rejected, time.Now().Format("15:04:05.000 ")+kind+" "+evidence.TokenKeyID([]byte(token))+": "+err.Error())
		p.mu.Unlock()
	case err == nil:
		accepted.Add(1)
	}
}

// Used is how many tokens were minted and accepted.
func (p *TokenProbe) Used() int64 { return p.used.Load() }

// HeldUsed is how many uses of the held tokens were accepted.
func (p *TokenProbe) HeldUsed() int64 { return p.heldUsed.Load() }

// Rejected names the tokens the API server rejected: when, minted or held,
// and the key ID.
func (p *TokenProbe) Rejected() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.rejected...)
}
