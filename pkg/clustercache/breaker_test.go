package clustercache

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/carousel-dev/carousel/pkg/scheme"
)

// troubledAPIServer is a managed API server whose storage can hang (every
// request but discovery taken and never answered, as with etcd without
// quorum) or fail (500), counting the reads of Secret s and the probes.
type troubledAPIServer struct {
	*httptest.Server
	hang, fail    atomic.Bool
	reads, probes atomic.Int32
	read          chan struct{} // a read of s arrived
	released      chan struct{}
}

func newTroubledAPIServer(t *testing.T) *troubledAPIServer {
	t.Helper()
	s := &troubledAPIServer{read: make(chan struct{}, 1), released: make(chan struct{})}
	answers := managedAPIHandler(new(atomic.Int32))
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/namespaces/kube-system/secrets/s":
			s.reads.Add(1)
			select {
			case s.read <- struct{}{}:
			default:
			}
		case probePath:
			s.probes.Add(1)
		default:
			answers.ServeHTTP(w, r)
			return
		}
		switch {
		case s.hang.Load():
			select {
			case <-r.Context().Done():
			case <-s.released:
			}
			// No answer at all: a handler that returns answers 200 (the
			// stream of a request cancelled late may still carry it).
			panic(http.ErrAbortHandler)
		case s.fail.Load():
			http.Error(w, "etcdserver: request timed out", http.StatusInternalServerError)
			return
		}
		answers.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { close(s.released); s.Close() })
	return s
}

// connectTo connects a Cache on clk, whose requests give up after a second
// (and probes after half of it: a new TLS connection under the race detector
// can take a tenth), to server.
func connectTo(t *testing.T, server *httptest.Server, clk *clocktesting.FakeClock) *Connection {
	t.Helper()
	key := client.ObjectKey{Namespace: "fleet", Name: "a"}
	c := &Cache{Scheme: scheme.New(), RequestTimeout: time.Second, Clock: clk}
	t.Cleanup(func() { c.Disconnect(key) })
	conn, err := c.connect(t.Context(), key, &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func readSecret(ctx context.Context, conn *Connection) error {
	return conn.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "s"}, &corev1.Secret{})
}

// A managed API server that stopped answering is probed once before the next
// request, and while the probe goes unanswered too the requests of the next
// probeInterval fail at once, without reaching it: a pass that reaches it no
// longer holds a worker for each request's timeout.
func TestAManagedAPIServerThatStopsAnsweringIsProbedBeforeItIsAskedAgain(t *testing.T) {
	for _, trouble := range []string{"hangs", "fails"} {
		t.Run(trouble, func(t *testing.T) {
			server := newTroubledAPIServer(t)
			clk := clocktesting.NewFakeClock(time.Now())
			conn := connectTo(t, server.Server, clk)
			if err := readSecret(t.Context(), conn); err != nil {
				t.Fatalf("a healthy API server: %v", err)
			}
			if got := server.probes.Load(); got != 0 {
				t.Fatalf("%d probes of an API server that answers, want none", got)
			}
			if trouble == "hangs" {
				server.hang.Store(true)
			} else {
				server.fail.Store(true)
			}
			if err := readSecret(t.Context(), conn); err == nil || errors.Is(err, ErrNotAnswering) {
				t.Fatalf("the request that found the API server %s: %v, want its own error", trouble, err)
			}
			err := readSecret(t.Context(), conn)
			if !errors.Is(err, ErrNotAnswering) {
				t.Fatalf("the next request: %v, want ErrNotAnswering", err)
			}
			if reads, probes := server.reads.Load(), server.probes.Load(); reads != 2 || probes != 1 {
				t.Fatalf("%d reads and %d probes, want the 2 reads before and 1 probe", reads, probes)
			}
			clk.Step(probeInterval - time.Second)
			if err := readSecret(t.Context(), conn); !errors.Is(err, ErrNotAnswering) {
				t.Fatalf("a request within %s of the failed probe: %v, want ErrNotAnswering", probeInterval, err)
			}
			if reads, probes := server.reads.Load(), server.probes.Load(); reads != 2 || probes != 1 {
				t.Fatalf("a request within %s of the failed probe reached the API server (%d reads, %d probes)", probeInterval, reads, probes)
			}
			clk.Step(time.Second)
			if err := readSecret(t.Context(), conn); !errors.Is(err, ErrNotAnswering) {
				t.Fatalf("a request once the probe interval passed, the API server still %s: %v", trouble, err)
			}
			if reads, probes := server.reads.Load(), server.probes.Load(); reads != 2 || probes != 2 {
				t.Fatalf("%d reads and %d probes once the probe interval passed, want 2 reads and a second probe", reads, probes)
			}

			server.hang.Store(false)
			server.fail.Store(false)
			clk.Step(probeInterval)
			if err := readSecret(t.Context(), conn); err != nil {
				t.Fatalf("the API server answers again: %v", err)
			}
			if err := readSecret(t.Context(), conn); err != nil {
				t.Fatalf("the API server answers again: %v", err)
			}
			if reads, probes := server.reads.Load(), server.probes.Load(); reads != 4 || probes != 3 {
				t.Fatalf("%d reads and %d probes once the API server answers, want both reads and one probe before the first", reads, probes)
			}
		})
	}
}

// A request its caller cancelled says nothing of the API server: the next
// one goes to it without a probe.
func TestARequestItsCallerCancelledIsNoSignOfTrouble(t *testing.T) {
	server := newTroubledAPIServer(t)
	conn := connectTo(t, server.Server, clocktesting.NewFakeClock(time.Now()))
	server.hang.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-server.read
		cancel()
	}()
	if err := readSecret(ctx, conn); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled request: %v", err)
	}
	server.hang.Store(false)
	if err := readSecret(t.Context(), conn); err != nil {
		t.Fatal(err)
	}
	if got := server.probes.Load(); got != 0 {
		t.Fatalf("%d probes after a cancelled request, want none", got)
	}
}

// A request in flight that is answered while a probe fails leaves the
// breaker closed: the API server answered after the probe was sent, and the
// request that waited for the probe goes to it, as do the next ones (a failed
// probe recorded over the answer made them fail for probeInterval).
func TestAnAnswerDuringAFailedProbeLeavesTheBreakerClosed(t *testing.T) {
	probing, release := make(chan struct{}), make(chan struct{})
	b := newBreaker(promhttp.RoundTripperFunc(func(*http.Request) (*http.Response, error) {
		close(probing)
		<-release
		return nil, errors.New("connection reset by peer")
	}), "https://192.0.2.1:6443", clocktesting.NewFakeClock(time.Now()), time.Second)
	b.record(nil, errors.New("timeout awaiting response headers"))
	admitted := make(chan error, 1)
	go func() { admitted <- b.admit(t.Context()) }()
	<-probing
	b.record(&http.Response{StatusCode: http.StatusOK}, nil)
	close(release)
	if err := <-admitted; err != nil {
		t.Fatalf("admit = %v, want the request let through: the API server answered during the probe", err)
	}
	if unanswered, failedAt := b.state(); unanswered || !failedAt.IsZero() {
		t.Errorf("unanswered %t, probe failed at %v; want the answer since to stand", unanswered, failedAt)
	}
}
