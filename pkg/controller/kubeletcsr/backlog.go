package kubeletcsr

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/carousel-dev/carousel/pkg/csr"
)

// The states of a request in the backlog, named as kubectl get csr names
// them.
const (
	// backlogPending is a request without a decision: Carousel's to approve
	// or deny, or an administrator's.
	backlogPending = "Pending"
	// backlogApproved is an approved request that is neither signed nor
	// marked Failed: Carousel's to sign.
	backlogApproved = "Approved"
)

var backlogStates = []string{backlogPending, backlogApproved}

var backlogSigners = []string{certificatesv1.KubeAPIServerClientKubeletSignerName, certificatesv1.KubeletServingSignerName}

// backlogListTimeout bounds a scrape's read of one managed cluster's cache.
// The read is from memory once the cache synced; the bound only keeps a
// scrape from hanging on a cache that is being torn down.
const backlogListTimeout = 5 * time.Second

// backlogSource is where the backlog of one managed cluster is read: the
// connection's cache of its CSRs.
type backlogSource struct {
	reader client.Reader
	// synced says whether the cache holds every CSR yet; until it does, the
	// cluster reports no backlog rather than a short one.
	synced func() bool
	clock  clock.PassiveClock
}

// backlog is a Prometheus collector of the kubelet CSRs that wait, in every
// managed cluster Carousel is connected to. It counts them when scraped, from
// the connections' caches: nothing is kept between scrapes, and the
// reconciler does no work for it.
type backlog struct {
	requests, oldest *prometheus.Desc

	mu      sync.Mutex
	sources map[client.ObjectKey]*backlogSource
}

func newBacklog() *backlog {
	labels := []string{"namespace", "cluster", "signer", "state"}
	return &backlog{
		requests: prometheus.NewDesc("carousel_csr_backlog_requests",
			"Kubelet CSRs for Carousel's signers in a connected managed cluster that wait: Pending (no decision yet) or Approved (neither signed nor marked Failed).",
			labels, nil),
		oldest: prometheus.NewDesc("carousel_csr_backlog_oldest_timestamp_seconds",
			"When the longest-waiting of those CSRs began to wait, as a Unix timestamp: its creation when Pending, its approval when Approved. Absent when none waits.",
			labels, nil),
		sources: map[client.ObjectKey]*backlogSource{},
	}
}

// Describe implements prometheus.Collector.
func (b *backlog) Describe(ch chan<- *prometheus.Desc) {
	ch <- b.requests
	ch <- b.oldest
}

// Collect implements prometheus.Collector.
func (b *backlog) Collect(ch chan<- prometheus.Metric) {
	b.mu.Lock()
	sources := maps.Clone(b.sources)
	b.mu.Unlock()
	for key, src := range sources {
		b.collect(key, src, ch)
	}
}

// waiting is what the backlog of one signer in one state holds.
type waiting struct {
	requests int
	since    time.Time // when the longest-waiting request began to wait
}

func (b *backlog) collect(key client.ObjectKey, src *backlogSource, ch chan<- prometheus.Metric) {
	if !src.synced() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), backlogListTimeout)
	defer cancel()
	list := &certificatesv1.CertificateSigningRequestList{}
	// Read only: the cache's objects are not copied.
	if err := src.reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	now := src.clock.Now()
	counts := map[[2]string]waiting{}
	for i := range list.Items {
		obj := &list.Items[i]
		if !ours(obj.Spec.SignerName) {
			continue
		}
		var state string
		var since time.Time
		// What waits is what csr.Next has the controller act on: a pending
		// request past its lifetime is about to be deleted, not waiting.
		switch csr.Next(obj, now).Action {
		case csr.ActionDecide:
			state, since = backlogPending, obj.CreationTimestamp.Time
		case csr.ActionSign:
			state, since = backlogApproved, approvalTime(obj)
		default:
			continue
		}
		k := [2]string{obj.Spec.SignerName, state}
		w := counts[k]
		w.requests++
		if w.since.IsZero() || since.Before(w.since) {
			w.since = since
		}
		counts[k] = w
	}
	for _, signer := range backlogSigners {
		for _, state := range backlogStates {
			w := counts[[2]string{signer, state}]
			ch <- prometheus.MustNewConstMetric(b.requests, prometheus.GaugeValue, float64(w.requests), key.Namespace, key.Name, signer, state)
			if w.requests > 0 {
				ch <- prometheus.MustNewConstMetric(b.oldest, prometheus.GaugeValue, float64(w.since.Unix()), key.Namespace, key.Name, signer, state)
			}
		}
	}
}

// approvalTime is when a request was approved: the time of its Approved
// condition, or its creation when the condition carries none.
func approvalTime(obj *certificatesv1.CertificateSigningRequest) time.Time {
	for _, c := range obj.Status.Conditions {
		if c.Type != certificatesv1.CertificateApproved {
			continue
		}
		switch {
		case !c.LastUpdateTime.IsZero():
			return c.LastUpdateTime.Time
		case !c.LastTransitionTime.IsZero():
			return c.LastTransitionTime.Time
		}
	}
	return obj.CreationTimestamp.Time
}

// track reports the backlog of the managed cluster of key from src until
// the returned function is called. A later track of the same key (a new
// connection) replaces src; the replaced one's function then does nothing.
func (b *backlog) track(key client.ObjectKey, src *backlogSource) (untrack func()) {
	b.mu.Lock()
	b.sources[key] = src
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		if b.sources[key] == src {
			delete(b.sources, key)
		}
		b.mu.Unlock()
	}
}
