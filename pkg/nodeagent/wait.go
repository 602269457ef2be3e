package nodeagent

import (
	"context"
	"errors"
	"time"

	"k8s.io/utils/clock"
)

// withClockTimeout is context.WithTimeout on clk, so that tests step the
// deadline with a fake clock.
func withClockTimeout(ctx context.Context, clk clock.Clock, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	deadline := clk.NewTimer(timeout)
	go func() {
		defer deadline.Stop()
		select {
		case <-deadline.C():
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// permanentError is an error of a check that waiting does not mend.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// pollUntil calls check until it returns nil or a permanentError, waiting
// between calls on clk with retry, and returns the last error of check once
// ctx ends.
func pollUntil(ctx context.Context, clk clock.Clock, retry *backoff, check func(context.Context) error) error {
	for {
		err := check(ctx)
		var permanent permanentError
		if err == nil || errors.As(err, &permanent) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-clk.After(retry.next()):
		}
	}
}
