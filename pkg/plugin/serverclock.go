package plugin

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// serverClock is the management API server's clock as its answers tell it
// (their Date header), advanced by the local clock since the latest one. An
// upload's bootstrap token expires by the cluster's clock (the sweep of
// every user's commands deletes it then, and kube-controller-manager's
// tokencleaner where it runs): a workstation whose clock is hours off must
// neither delete another user's live upload nor write one that expired
// already. An admin kubeconfig is dated by it too, the closest guess the
// plugin has of the managed API server's clock, which judges it.
type serverClock struct {
	local clock.PassiveClock
	mu    sync.Mutex
	date  time.Time // the Date of the latest answer
	at    time.Time // the local time it arrived
}

// observe takes the time an answer's headers give, if they give one.
func (s *serverClock) observe(h http.Header) {
	date, err := http.ParseTime(h.Get("Date"))
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.date, s.at = date, s.local.Now()
}

// Now is the API server's time; the local time before it answered.
func (s *serverClock) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.date.IsZero() {
		return s.local.Now()
	}
	return s.date.Add(s.local.Since(s.at))
}

// watch has cfg's answers set the clock.
func (s *serverClock) watch(cfg *rest.Config) {
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return promhttp.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(req)
			if err == nil {
				s.observe(resp.Header)
			}
			return resp, err
		})
	})
}

// serverNow is the management API server's time (serverClock), or the
// local clock's for an env without one.
func (e *env) serverNow() time.Time {
	if e.server == nil {
		return e.clock.Now()
	}
	return e.server.Now()
}
