package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

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

// TestHeldUnavailableAfterTunnelCut: a request the API server answered
// "service unavailable" itself is allowed only while the APIService was
// unavailable because a tunnel agent's end had just cut the availability
// check, never for a check that a certificate failed.
func TestHeldUnavailableAfterTunnelCut(t *testing.T) {
	stop := time.Date(2026, 11, 27, 21, 31, 3, 351e6, time.UTC)
	at := stop.Add
	// As the probe reports the aggregator's own answer (see nodeMetrics).
	unavailable := fmt.Errorf("%w: %.300s", &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
		Message: "the server is currently unable to handle the request",
	}}, "service unavailable\n")
	unreachable := fmt.Errorf("%w: %.300s", &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
		Message: "the server is currently unable to handle the request",
	}}, "error trying to reach service: dial tcp 192.0.2.21:4443: connect: connection refused")
	cut := apiServiceOutage{Window: framework.Window{Start: at(300 * time.Millisecond), End: at(900 * time.Millisecond)},
		reason: "FailedDiscoveryCheck", message: `failing or missing response from https://192.0.2.21:4443/apis/metrics.k8s.io/v1beta1: Get "https://192.0.2.21:4443/apis/metrics.k8s.io/v1beta1": EOF`}
	refused := cut
	refused.message = `failing or missing response from https://192.0.2.21:4443/apis/metrics.k8s.io/v1beta1: tls: failed to verify certificate: x509: certificate signed by unknown authority`
	late := cut
	late.Window = framework.Window{Start: at(20 * time.Second), End: at(21 * time.Second)}
	ongoing := cut
	ongoing.End = time.Time{}
	// The failure the CI run of 620fbff reported.
	seen := failure{sent: at(350 * time.Millisecond), at: at(656 * time.Millisecond), err: unavailable}
	for name, tc := range map[string]struct {
		f       failure
		outages []apiServiceOutage
		want    bool
	}{
		"answered while a cut check held it unavailable":   {seen, []apiServiceOutage{cut}, true},
		"answered while it still was":                      {seen, []apiServiceOutage{ongoing}, true},
		"answered a moment after the watch saw it back":    {failure{sent: at(1500 * time.Millisecond), at: at(1600 * time.Millisecond), err: unavailable}, []apiServiceOutage{cut}, true},
		"answered long after it was back":                  {failure{sent: at(5 * time.Second), at: at(5100 * time.Millisecond), err: unavailable}, []apiServiceOutage{cut}, false},
		"no outage seen":                                   {seen, nil, false},
		"the check refused a certificate":                  {seen, []apiServiceOutage{refused}, false},
		"an outage long after any agent's end":             {failure{sent: at(20500 * time.Millisecond), at: at(20600 * time.Millisecond), err: unavailable}, []apiServiceOutage{late}, false},
		"metrics-server unreachable, not held unavailable": {failure{sent: seen.sent, at: seen.at, err: unreachable}, []apiServiceOutage{cut}, false},
	} {
		got := heldUnavailableAfterTunnelCut(tc.f, tc.outages, []time.Time{stop.Add(-time.Hour), stop}, tunnelCutTolerance) != ""
		if got != tc.want {
			t.Errorf("%s: allowed = %t, want %t", name, got, tc.want)
		}
	}
}

// TestAPIServiceOutages: the recorder opens an outage when the APIService
// turns unavailable and closes it when it is back, once each.
func TestAPIServiceOutages(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 21, 31, 3, 0, time.UTC)
	available := &apiregistrationv1.APIServiceCondition{Type: apiregistrationv1.Available, Status: apiregistrationv1.ConditionTrue}
	failed := &apiregistrationv1.APIServiceCondition{Type: apiregistrationv1.Available, Status: apiregistrationv1.ConditionFalse,
		Reason: "FailedDiscoveryCheck", Message: "failing or missing response"}
	a := &apiServiceOutages{}
	for i, c := range []*apiregistrationv1.APIServiceCondition{available, failed, failed, available, available, nil} {
		a.observe(c, t0.Add(time.Duration(i)*time.Second))
	}
	want := []apiServiceOutage{
		{Window: framework.Window{Start: t0.Add(time.Second), End: t0.Add(3 * time.Second)}, reason: "FailedDiscoveryCheck", message: "failing or missing response"},
		{Window: framework.Window{Start: t0.Add(5 * time.Second)}},
	}
	if got := a.all(); !slices.Equal(got, want) {
		t.Errorf("outages = %v, want %v", got, want)
	}
	if got := a.statesSeen(); got != 6 {
		t.Errorf("states seen = %d, want 6", got)
	}
}
