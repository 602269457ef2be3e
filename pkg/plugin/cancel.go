package plugin

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
)

// cancelledWith makes every request of cfg end when ctx does, the command's
// context, which an interrupt cancels: the discovery requests of
// controller-runtime's client carry no context of their own, and a command
// waiting on an API server that does not answer would otherwise neither end
// nor undo what it began (a file created, not filled). A request on a
// cleanupContext is the exception: it undoes what the command began, after
// the interrupt too.
func cancelledWith(ctx context.Context, cfg *rest.Config) {
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return promhttp.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.Context().Value(cleanupKey{}) != nil {
				return next.RoundTrip(req)
			}
			reqCtx, cancel := context.WithCancel(req.Context())
			stop := context.AfterFunc(ctx, cancel)
			done := func() {
				stop()
				cancel()
			}
			resp, err := next.RoundTrip(req.WithContext(reqCtx))
			if err != nil {
				done()
				return nil, err
			}
			resp.Body = &closeThen{ReadCloser: resp.Body, then: done}
			return resp, nil
		})
	})
}

// closeThen is a response body that calls then once closed.
type closeThen struct {
	io.ReadCloser
	then func()
}

func (c *closeThen) Close() error {
	err := c.ReadCloser.Close()
	c.then()
	return err
}

// cleanupKey marks the context of a cleanup (cleanupContext).
type cleanupKey struct{}

// cleanupContext is the context of the deletions that undo a command's
// half-done writes: they run after the command's own context ended too (a
// Ctrl-C), for at most cleanupTimeout, and cancelledWith lets them.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithValue(context.WithoutCancel(ctx), cleanupKey{}, true), cleanupTimeout)
}

const cleanupTimeout = 30 * time.Second
