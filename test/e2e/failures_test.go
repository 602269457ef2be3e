package e2e

import (
	"errors"
	"testing"
	"time"
)

// TestClosedWhileInFlight: a request is cut by an agent's end when the end
// fell while it was under way, however late its failure reached the probe.
func TestClosedWhileInFlight(t *testing.T) {
	stop := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	eof := errors.New("the server is currently unable to handle the request: error trying to reach service: unexpected EOF")
	for name, tc := range map[string]struct {
		sent, at time.Duration // from the stop
		err      error
		want     bool
	}{
		"failed right at the stop":           {-100 * time.Millisecond, 50 * time.Millisecond, eof, true},
		"failed seconds after it":            {-500 * time.Millisecond, 4 * time.Second, eof, true},
		"sent on the dying connection":       {time.Second, 1200 * time.Millisecond, eof, true},
		"sent well after it":                 {5 * time.Second, 5100 * time.Millisecond, eof, false},
		"over well before it":                {-10 * time.Second, -9 * time.Second, eof, false},
		"in flight, but refused a handshake": {-time.Second, time.Second, errors.New("x509: certificate signed by unknown authority"), false},
	} {
		f := failure{sent: stop.Add(tc.sent), at: stop.Add(tc.at), err: tc.err}
		if got := closedWhileInFlight(f, []time.Time{stop.Add(-time.Hour), stop}, tunnelCutTolerance); got != tc.want {
			t.Errorf("%s: closedWhileInFlight = %t, want %t", name, got, tc.want)
		}
	}
}
