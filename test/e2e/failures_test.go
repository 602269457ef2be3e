package e2e

import (
	"errors"
	"testing"
	"time"

	"github.com/carousel-dev/carousel/test/framework"
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
		"cut after the answer's headers": {-80 * time.Millisecond, 0, errors.New(`Get "https://127.0.0.1:45281/apis/metrics.k8s.io/v1beta1/nodes?timeout=5s": ` +
			"stream error: stream ID 201; INTERNAL_ERROR; received from peer"), true},
		"an answer cut well after it": {10 * time.Second, 10100 * time.Millisecond, errors.New("stream error: stream ID 201; INTERNAL_ERROR; received from peer"), false},
	} {
		f := failure{sent: stop.Add(tc.sent), at: stop.Add(tc.at), err: tc.err}
		if got := closedWhileInFlight(f, []time.Time{stop.Add(-time.Hour), stop}, tunnelCutTolerance); got != tc.want {
			t.Errorf("%s: closedWhileInFlight = %t, want %t", name, got, tc.want)
		}
	}
}

// TestKubeletRestartExcuses: a call under way during its kubelet's restart
// is excused however late it failed; a late heartbeat only if the kubelet
// had renewed until the restart began.
func TestKubeletRestartExcuses(t *testing.T) {
	start := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	restarts := []framework.Window{{Start: start, End: start.Add(3 * time.Second)}}
	refused := errors.New("dial tcp 192.0.2.11:10250: connect: connection refused")
	late := errors.New("lease of demo-node-1 last renewed 7s ago")
	for name, tc := range map[string]struct {
		f    failure
		late bool // a Lease sample rather than a call
		want bool
	}{
		"a call refused in the restart":             {f: failure{sent: start.Add(time.Second), at: start.Add(time.Second)}, want: true},
		"a call sent before it, failed long after":  {f: failure{sent: start.Add(-time.Second), at: start.Add(20 * time.Second)}, want: true},
		"a call a moment after it":                  {f: failure{sent: start.Add(4 * time.Second), at: start.Add(4 * time.Second)}, want: true},
		"a call well after it":                      {f: failure{sent: start.Add(8 * time.Second), at: start.Add(8 * time.Second)}, want: false},
		"a late heartbeat in the restart":           {f: failure{sent: start.Add(3 * time.Second), at: start.Add(3 * time.Second), renewed: start.Add(-time.Second)}, late: true, want: true},
		"a heartbeat late since before the restart": {f: failure{sent: start.Add(3 * time.Second), at: start.Add(3 * time.Second), renewed: start.Add(-20 * time.Second)}, late: true, want: false},
		"a heartbeat still late after it":           {f: failure{sent: start.Add(9 * time.Second), at: start.Add(9 * time.Second), renewed: start.Add(-time.Second)}, late: true, want: false},
		"a Lease sample without a renewal":          {f: failure{sent: start.Add(time.Second), at: start.Add(time.Second)}, late: true, want: false},
	} {
		var got bool
		if tc.late {
			tc.f.err = late
			got = heartbeatLateFromRestart(tc.f, restarts)
		} else {
			tc.f.err = refused
			got = duringKubeletRestart(tc.f, restarts)
		}
		if got != tc.want {
			t.Errorf("%s: excused = %t, want %t", name, got, tc.want)
		}
	}
}
