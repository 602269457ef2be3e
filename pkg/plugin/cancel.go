package plugin

import (
	"context"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
)

// cancelledWith makes every request of cfg end when ctx does, the command's
// context, which an interrupt cancels: the discovery requests of
// controller-runtime's client carry no context of their own, and a command
// waiting on an API server that does not answer would otherwise neither end
// nor undo what it began (a file created, not filled).
func cancelledWith(ctx context.Context, cfg *rest.Config) {
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return promhttp.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
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
