package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiservicehelper "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/carousel-dev/carousel/test/framework"
)

// metricsPath lists the nodes' metrics, which the aggregator proxies to
// metrics-server.
const metricsPath = "/apis/metrics.k8s.io/v1beta1/nodes"

// readNodeMetrics is the aggregated API probe's request: the API server
// proxies it to metrics-server with its front-proxy client certificate,
// verifying metrics-server's serving certificate with the APIService's
// caBundle; metrics-server authenticates the API server through the
// front-proxy CA and has scraped the kubelets over their serving
// certificates.
func readNodeMetrics(ctx context.Context, cs kubernetes.Interface) error {
	_, err := nodeMetrics(ctx, cs)
	return err
}

// nodeMetrics lists the nodes' metrics through the aggregator and returns the
// names of the nodes it has metrics of.
func nodeMetrics(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	body, err := cs.CoreV1().RESTClient().Get().AbsPath(metricsPath).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %.300s", err, body)
	}
	var list struct {
		Kind  string `json:"kind"`
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("reading the NodeMetricsList: %w: %.300s", err, body)
	}
	if list.Kind != "NodeMetricsList" {
		return nil, fmt.Errorf("not a NodeMetricsList: %.300s", body)
	}
	names := make([]string, 0, len(list.Items))
	for _, item := range list.Items {
		names = append(names, item.Metadata.Name)
	}
	return names, nil
}

// servedCertificate is the certificate a server in the network namespace
// serves. It needs no client certificate even from a server that asks for
// one: with TLS 1.3 the client's side of the handshake ends before the
// server checks it.
func servedCertificate(ctx context.Context, address string) (*x509.Certificate, error) {
	conn, err := env.Netns.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, err
	}
	tlsConn := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the certificate; the caller verifies it
	defer func() { _ = tlsConn.Close() }()
	if err := tlsConn.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return tlsConn.ConnectionState().PeerCertificates[0], nil
}

// metricsServerRuns reports whether the environment runs metrics-server; an
// existing management cluster's managed clusters are not ours to look into.
func metricsServerRuns() bool { return env != nil && env.ControlPlane.MetricsServer }

// apiServiceOutages records, from a watch, when the metrics APIService was
// unavailable. While its Available condition is false, every API server
// answers requests for metrics.k8s.io itself, with 503 "service
// unavailable", and does not try metrics-server: the condition is the
// aggregator's availability check's verdict, which it reaches with five
// discovery requests sent at once over one connection, through the tunnel.
// If that connection breaks as a tunnel agent ends, all five fail and the
// APIService is unavailable until the check, requeued at once, passes.
type apiServiceOutages struct {
	mu      sync.Mutex
	outages []apiServiceOutage
	// seen counts the states the watch saw, the first one included: none
	// would mean a watch that never worked, which sees no outage either.
	seen int
}

// apiServiceOutage is a time the APIService was unavailable, as the watch
// saw it: from the event that set Available false until the one that set it
// true again (End is zero while it lasts), with the check's reason and
// message.
type apiServiceOutage struct {
	framework.Window
	reason, message string
}

func (o apiServiceOutage) String() string {
	end := "ongoing"
	if !o.End.IsZero() {
		end = o.End.Format("15:04:05.000")
	}
	return fmt.Sprintf("%s to %s: %s: %s", o.Start.Format("15:04:05.000"), end, o.reason, o.message)
}

// run watches the APIService until ctx ends, as the admin client of f
// (a follower of its own), resuming each watch that ends where it left off.
func (a *apiServiceOutages) run(ctx context.Context, f *follower) {
	resourceVersion := ""
	for ctx.Err() == nil {
		f.current(ctx)
		resourceVersion = a.watch(ctx, f.kubeconfig, resourceVersion)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watch records the APIService's changes after resourceVersion (its state
// now, if empty) until the watch ends, and returns the resource version to
// resume from.
func (a *apiServiceOutages) watch(ctx context.Context, kubeconfig []byte, resourceVersion string) string {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return resourceVersion
	}
	cs, err := aggregatorclient.NewForConfig(cfg)
	if err != nil {
		return resourceVersion
	}
	w, err := cs.ApiregistrationV1().APIServices().Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", framework.MetricsAPIService).String(), ResourceVersion: resourceVersion,
	})
	if err != nil {
		if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
			return ""
		}
		return resourceVersion
	}
	defer w.Stop()
	for event := range w.ResultChan() {
		switch s, ok := event.Object.(*apiregistrationv1.APIService); {
		case event.Type == watch.Error:
			if err := apierrors.FromObject(event.Object); apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				return ""
			}
			return resourceVersion
		case ok:
			resourceVersion = s.ResourceVersion
			a.observe(apiservicehelper.GetAPIServiceConditionByType(s, apiregistrationv1.Available), time.Now())
		}
	}
	return resourceVersion
}

// observe opens an outage when the APIService turns unavailable at now, and
// ends it when it turns available.
func (a *apiServiceOutages) observe(available *apiregistrationv1.APIServiceCondition, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen++
	last := len(a.outages) - 1
	open := last >= 0 && a.outages[last].End.IsZero()
	switch up := available != nil && available.Status == apiregistrationv1.ConditionTrue; {
	case !up && !open:
		outage := apiServiceOutage{Window: framework.Window{Start: now}}
		if available != nil {
			outage.reason, outage.message = available.Reason, available.Message
		}
		a.outages = append(a.outages, outage)
	case up && open:
		a.outages[last].End = now
	}
}

func (a *apiServiceOutages) all() []apiServiceOutage {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.outages)
}

// statesSeen is how many states of the APIService the watch saw.
func (a *apiServiceOutages) statesSeen() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen
}

// apiServiceUnavailable is the answer of an API server that holds the
// APIService unavailable, as the aggregated API probe reports it.
var apiServiceUnavailable = regexp.MustCompile(`^the server is currently unable to handle the request: service unavailable\s*$`)

// refusedCertificate is how a TLS handshake that one side refused over a
// certificate reads, in any failure the journey may allow.
var refusedCertificate = regexp.MustCompile(`x509|bad certificate|unknown authority|certificate required`)

// availabilityCheckTimeout is how long the aggregator's availability check
// waits for its discovery requests: a connection cut under them can take
// that long to fail.
const availabilityCheckTimeout = 6 * time.Second

const heldUnavailableReason = "a tunnel agent's end cut the aggregator's availability check, which held the APIService unavailable"

// heldUnavailableAfterTunnelCut says, for a request for the aggregated API
// that an API server answered itself because the APIService was
// unavailable, that it is allowed when the availability check that made it
// unavailable failed as a tunnel agent ended: the APIService turned
// unavailable within the check's timeout of an agent's end, for a reason
// other than a refused certificate, and was still unavailable (give or
// take tolerance, the API servers see it through their own informers) while
// the request was under way. Otherwise "".
func heldUnavailableAfterTunnelCut(f failure, outages []apiServiceOutage, stops []time.Time, tolerance time.Duration) string {
	if !apiServiceUnavailable.MatchString(f.err.Error()) || !apierrors.IsServiceUnavailable(f.err) {
		return ""
	}
	for _, o := range outages {
		if o.reason != "FailedDiscoveryCheck" || refusedCertificate.MatchString(o.message) {
			continue
		}
		held := o.Window
		if held.End.IsZero() {
			held.End = f.at
		}
		cutByStop := slices.ContainsFunc(stops, func(stop time.Time) bool {
			return framework.Window{Start: stop, End: stop.Add(availabilityCheckTimeout)}.Contains(o.Start, tolerance)
		})
		if cutByStop && held.Overlaps(f.inFlight(), tolerance) {
			return heldUnavailableReason
		}
	}
	return ""
}
