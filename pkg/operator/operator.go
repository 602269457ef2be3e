// Package operator assembles the Carousel controller manager: the scheme, the
// cache restrictions, the controllers and the admission webhooks. The
// binary and the test suites set it up the same way.
package operator

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/auditwebhook"
	"github.com/carousel-dev/carousel/pkg/clustercache"
	"github.com/carousel-dev/carousel/pkg/controller/apiservicebundle"
	campaigncontroller "github.com/carousel-dev/carousel/pkg/controller/campaign"
	clustercontroller "github.com/carousel-dev/carousel/pkg/controller/cluster"
	"github.com/carousel-dev/carousel/pkg/controller/kubeletbootstrap"
	"github.com/carousel-dev/carousel/pkg/controller/kubeletcsr"
	"github.com/carousel-dev/carousel/pkg/controller/workerrollout"
	"github.com/carousel-dev/carousel/pkg/evidence"
	"github.com/carousel-dev/carousel/pkg/oldca"
	"github.com/carousel-dev/carousel/pkg/rotation"
	"github.com/carousel-dev/carousel/pkg/scheme"
	"github.com/carousel-dev/carousel/pkg/sharding"
	campaignwebhook "github.com/carousel-dev/carousel/pkg/webhook/campaign"
	clusterwebhook "github.com/carousel-dev/carousel/pkg/webhook/cluster"
)

// Options are the settings of the controllers.
type Options struct {
	// CAExpiryWarning is how long before a CA's expiry the CAExpiringSoon condition turns True.
	CAExpiryWarning time.Duration
	// Recommendations is when the CARotationRecommended condition turns
	// True and the webhook warns: a rotation older than its
	// RotationInterval, or Prepared for longer than its PreparedWarning.
	Recommendations rotation.RecommendationPolicy
	// ManagedPollInterval is how soon a rotation waiting on the managed
	// cluster (API-server evidence, node renewals) looks again.
	ManagedPollInterval time.Duration
	// MaxManagedPollInterval caps the backoff of those polls while the
	// managed API server keeps failing.
	MaxManagedPollInterval time.Duration
	// ManagedCleanupTimeout is how long a deleted Cluster waits for Carousel
	// to clean its managed cluster before it is released anyway.
	ManagedCleanupTimeout time.Duration
	// EvidenceTimeout bounds each request to a managed API server.
	EvidenceTimeout time.Duration
	// APIServiceResync is how often the labelled APIServices of each managed
	// cluster are looked at again.
	APIServiceResync time.Duration
	// Webhook serves the Cluster admission webhook.
	Webhook bool
	// CSRControllers runs the kubelet CSR approver and signer in each managed cluster.
	CSRControllers bool
	// CSRMaxDuration caps the validity of the kubelet certificates Carousel signs.
	CSRMaxDuration time.Duration
	// CSRConcurrency is how many CSRs are handled at once, across the managed clusters.
	CSRConcurrency int
	// ManagedQPS and ManagedBurst limit each managed-cluster connection's
	// requests to its API server.
	ManagedQPS   float32
	ManagedBurst int
	// ClusterConcurrency is how many Clusters the Cluster controller
	// reconciles at once (DefaultClusterConcurrency), and each of the
	// controllers that reach managed clusters (kubelet bootstrap, APIService
	// bundles).
	ClusterConcurrency int
	// MemoryLimitRatio is the share of the container's memory limit the Go
	// runtime keeps under (see SetMemoryLimit); 0 sets no limit.
	MemoryLimitRatio float64
	// Clock is the controllers' clock; nil means the real one.
	Clock clock.PassiveClock
	// Shard, when enabled, runs the manager as a shard of a ControllerRing
	// (ConfigureManager has then been called on it).
	Shard sharding.Shard
	// AuditWebhookURL is the base URL at which managed API servers reach
	// the audit webhook receiver this manager's webhook server serves
	// (auditwebhook.PathPrefix); empty keeps no audit-webhook Secrets.
	AuditWebhookURL string
	// AuditWebhookCAFile holds the PEM bundle that verifies the receiver's
	// serving certificate, read at each reconcile (a mounted Secret changes).
	AuditWebhookCAFile string
	// OldCAUsageWindow is how recent a client certificate's use must be for
	// the old-CA usage gate to count it.
	OldCAUsageWindow time.Duration
}

// ShardCampaignResync is how often a shard looks again at a campaign with
// Clusters left: it hears only of its own Clusters' changes.
const ShardCampaignResync = 10 * time.Second

// DefaultClusterConcurrency is how many Clusters are reconciled at once by
// default. A new Cluster takes some thirty writes one after another, so one
// worker waits on the API server most of the time: in make bench-fleet's 300
// Clusters on two cores, four workers brought them to Ready 1.6 times as fast
// and through each phase of a rotation about twice as fast as one, for 10 MiB
// more memory, the API server then being the limit.
const DefaultClusterConcurrency = 4

// LeaderElectionID names the Lease of the manager's leader election, in
// --leader-election-namespace; the chart's Role grants that one by name.
const LeaderElectionID = "carousel-controller-manager.carousel.dev"

// DefaultOptions are the defaults of the binary's flags.
func DefaultOptions() Options {
	return Options{
		CAExpiryWarning: 30 * 24 * time.Hour, ManagedPollInterval: 5 * time.Second, EvidenceTimeout: 10 * time.Second, Webhook: true,
		Recommendations:        rotation.RecommendationPolicy{RotationInterval: 90 * 24 * time.Hour, PreparedWarning: 7 * 24 * time.Hour},
		APIServiceResync:       apiservicebundle.DefaultResync,
		MaxManagedPollInterval: clustercontroller.DefaultMaxManagedPollInterval, ManagedCleanupTimeout: kubeletbootstrap.DefaultCleanupTimeout,
		CSRControllers: true, CSRMaxDuration: 365 * 24 * time.Hour, ClusterConcurrency: DefaultClusterConcurrency, MemoryLimitRatio: DefaultMemoryLimitRatio,
		CSRConcurrency: kubeletcsr.DefaultConcurrency, ManagedQPS: clustercache.DefaultQPS, ManagedBurst: clustercache.DefaultBurst,
		OldCAUsageWindow: clustercontroller.DefaultOldCAUsageWindow, Shard: sharding.Shard{LeaseDuration: sharding.DefaultLeaseDuration},
	}
}

// Validate says which options are out of bounds.
func (o Options) Validate() error {
	var errs []error
	if o.ClusterConcurrency < 1 {
		errs = append(errs, fmt.Errorf("--cluster-concurrency=%d: reconcile at least one Cluster at a time", o.ClusterConcurrency))
	}
	if !(o.MemoryLimitRatio >= 0 && o.MemoryLimitRatio <= 1) { // NaN too
		errs = append(errs, fmt.Errorf("--memory-limit-ratio=%g: a share of the memory limit from 0 (none) to 1", o.MemoryLimitRatio))
	}
	if o.CSRConcurrency < 1 {
		errs = append(errs, fmt.Errorf("--csr-concurrency=%d: handle at least one CSR at a time", o.CSRConcurrency))
	}
	if o.CSRMaxDuration <= 0 {
		errs = append(errs, fmt.Errorf("--csr-max-duration=%s: must be positive", o.CSRMaxDuration))
	}
	// The consumers of these take a zero for their default, and a negative
	// value for none at all: no timeout, no requeue, a warning only once the
	// CA has expired.
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"old-ca-usage-window", o.OldCAUsageWindow},
		{"ca-expiry-warning", o.CAExpiryWarning},
		{"managed-poll-interval", o.ManagedPollInterval},
		{"max-managed-poll-interval", o.MaxManagedPollInterval},
		{"managed-cleanup-timeout", o.ManagedCleanupTimeout},
		{"apiservice-resync", o.APIServiceResync},
		{"evidence-timeout", o.EvidenceTimeout},
	} {
		if d.value <= 0 {
			errs = append(errs, fmt.Errorf("--%s=%s: must be positive", d.flag, d.value))
		}
	}
	// The usage record forgets a client oldca.Retention after its last use,
	// and trails it by up to oldca.Settling: a longer window would count
	// uses the record no longer holds.
	if longest := oldca.Retention - oldca.Settling; o.OldCAUsageWindow > longest {
		errs = append(errs, fmt.Errorf("--old-ca-usage-window=%s: at most %s, as long as the record of client certificates in use keeps a use", o.OldCAUsageWindow, longest))
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"ca-rotation-interval", o.Recommendations.RotationInterval},
		{"ca-rotation-prepared-warning", o.Recommendations.PreparedWarning},
	} {
		if d.value < 0 {
			errs = append(errs, fmt.Errorf("--%s=%s: 0 (off) or positive", d.flag, d.value))
		}
	}
	if o.AuditWebhookURL != "" {
		switch u, err := url.Parse(o.AuditWebhookURL); {
		case err != nil || u.Scheme != "https" || u.Host == "":
			errs = append(errs, fmt.Errorf("--audit-webhook-url=%q: an https URL, such as https://carousel-webhook.carousel-system.svc:443%s",
				o.AuditWebhookURL, strings.TrimSuffix(auditwebhook.PathPrefix, "/")))
		case !strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), strings.TrimSuffix(auditwebhook.PathPrefix, "/")) || u.RawQuery != "" || u.Fragment != "":
			// A Cluster's API server sends to <url>/<namespace>/<name>, which
			// the receiver serves under its path prefix only.
			errs = append(errs, fmt.Errorf("--audit-webhook-url=%q: its path must end in %s, under which the webhook server receives the events, and it has no query",
				o.AuditWebhookURL, strings.TrimSuffix(auditwebhook.PathPrefix, "/")))
		case o.AuditWebhookCAFile == "":
			errs = append(errs, errors.New("--audit-webhook-url needs --audit-webhook-ca-file, the bundle that verifies the webhook server"))
		case !o.Webhook:
			errs = append(errs, errors.New("--audit-webhook-url needs --webhook=true: the webhook server receives the audit events"))
		}
	}
	if d := o.Shard.LeaseDuration; o.Shard.Enabled() && (d < time.Second || d%time.Second != 0) {
		// A Lease holds its duration in whole seconds: 500ms would be 0,
		// and the sharder would take the shard for dead after every renewal.
		errs = append(errs, fmt.Errorf("--shard-lease-duration=%s: a whole number of seconds, at least 1s (a Lease holds it in seconds)", d))
	}
	if !(o.ManagedQPS > 0) || math.IsInf(float64(o.ManagedQPS), 1) || o.ManagedBurst < 1 { // client-go takes NaN and +Inf for no limit
		errs = append(errs, fmt.Errorf("--managed-kube-api-qps=%g --managed-kube-api-burst=%d: both must be positive", o.ManagedQPS, o.ManagedBurst))
	}
	return errors.Join(errs...)
}

// ManagerOptions returns the manager options Carousel needs (scheme and
// cache). A leader that stops releases its Lease, so that a standby takes
// over at once rather than a lease duration later (a rolling update stalled
// every reconcile and CSR for 15 s): the binary ends as soon as the manager
// has stopped, which makes that safe.
func ManagerOptions() ctrl.Options {
	return ctrl.Options{Scheme: scheme.New(), Cache: clustercontroller.CacheOptions(), LeaderElectionReleaseOnCancel: true}
}

// Setup registers the controllers, and the webhook when enabled, with mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	recorder := mgr.GetEventRecorder("carousel-controller-manager")
	connections := &clustercache.Cache{Management: mgr.GetClient(), Scheme: mgr.GetScheme(), QPS: opts.ManagedQPS, Burst: opts.ManagedBurst}
	var csrMetrics *kubeletcsr.Metrics
	if opts.CSRControllers {
		csrMetrics = kubeletcsr.NewMetrics(metrics.Registry)
		csrs := &kubeletcsr.Controllers{Management: mgr.GetClient(), Clock: clk, MaxDuration: opts.CSRMaxDuration, Concurrency: opts.CSRConcurrency,
			Metrics: csrMetrics, Recorder: kubeletcsr.NewRecorder(mgr.GetClient(), mgr.GetAPIReader(), clk, opts.CSRMaxDuration, csrMetrics)}
		if err := csrs.SetupWithManager(mgr); err != nil {
			return err
		}
		connections.OnConnect = append(connections.OnConnect, csrs.OnConnect)
	}
	if err := mgr.Add(connections); err != nil {
		return err
	}
	bootstrapper := &kubeletbootstrap.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: clk, Connections: connections,
		Recorder: recorder, CleanupTimeout: opts.ManagedCleanupTimeout, Concurrency: opts.ClusterConcurrency}
	if err := bootstrapper.SetupWithManager(mgr); err != nil {
		return err
	}
	apiServices := &apiservicebundle.Reconciler{Client: mgr.GetClient(), Connections: connections, Recorder: recorder, Resync: opts.APIServiceResync,
		Concurrency: opts.ClusterConcurrency}
	if err := apiServices.SetupWithManager(mgr); err != nil {
		return err
	}
	// Longer than the time between two looks at a cluster's nodes: the
	// poll interval, which backs off up to its maximum (never below the
	// interval itself), or the gate's minute.
	offlineNodes := &workerrollout.OfflineNodes{Gap: 2 * max(opts.ManagedPollInterval,
		cmp.Or(opts.MaxManagedPollInterval, clustercontroller.DefaultMaxManagedPollInterval), time.Minute)}
	r := &clustercontroller.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Clock:     clk,
		Recorder:  recorder,
		Evidence:  evidence.Checker{Timeout: opts.EvidenceTimeout},
		WorkerRollouts: map[v1alpha1.WorkerRolloutStrategy]clustercontroller.WorkerRollout{
			v1alpha1.RolloutManual: workerrollout.ManualRollout{},
			v1alpha1.RolloutInPlace: &workerrollout.InPlaceRollout{Connections: connections, Management: mgr.GetClient(), Bundles: mgr.GetAPIReader(), Clock: clk,
				Offline: offlineNodes},
			v1alpha1.RolloutReplace: &workerrollout.ReplaceRollout{Connections: connections, Management: mgr.GetClient(),
				Uncached: mgr.GetAPIReader(), Clock: clk, Recorder: recorder},
		},
		CAExpiryWarning:        opts.CAExpiryWarning,
		Recommendations:        opts.Recommendations,
		ManagedPollInterval:    opts.ManagedPollInterval,
		MaxManagedPollInterval: opts.MaxManagedPollInterval,
		Metrics:                clustercontroller.NewMetrics(metrics.Registry),
		ManagedNodes:           clustercontroller.ManagedNodes(connections),
		OldCAUsageWindow:       opts.OldCAUsageWindow,
		OfflineNodes:           offlineNodes,
		OnForget:               csrMetrics.Forget,
	}
	if opts.AuditWebhookURL != "" {
		caFile := opts.AuditWebhookCAFile
		r.AuditWebhook = &clustercontroller.AuditWebhook{URL: opts.AuditWebhookURL, CABundle: func() ([]byte, error) { return os.ReadFile(caFile) }}
	}
	if err := r.SetupWithManager(mgr, controller.Options{MaxConcurrentReconciles: opts.ClusterConcurrency}, opts.Shard); err != nil {
		return err
	}
	campaigns := &campaigncontroller.Reconciler{Client: mgr.GetClient(), Clock: clk, Recorder: recorder, Metrics: campaigncontroller.NewMetrics(metrics.Registry)}
	if opts.Shard.Enabled() {
		campaigns.Clusters, campaigns.Resync = mgr.GetAPIReader(), ShardCampaignResync
	}
	if err := campaigns.SetupWithManager(mgr, opts.Shard); err != nil {
		return err
	}
	if opts.Webhook {
		return SetupWebhooks(mgr, opts, clk)
	}
	return nil
}

// SetupWebhooks registers the admission webhooks of Clusters and
// RotationCampaigns, and the audit webhook receiver, with mgr's webhook server.
func SetupWebhooks(mgr ctrl.Manager, opts Options, clk clock.PassiveClock) error {
	if err := clusterwebhook.SetupWithManager(mgr, clusterwebhook.Validator{Recommendations: opts.Recommendations, Clock: clk}); err != nil {
		return err
	}
	// The audit events carry the API server's real times, whatever clock the webhooks decide by.
	receiver := &auditwebhook.Receiver{Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Client: mgr.GetClient(), Clock: clock.RealClock{}, Requests: auditwebhook.NewRequestsCounter(metrics.Registry)}
	mgr.GetWebhookServer().Register(auditwebhook.PathPrefix, receiver)
	// It writes, as the manager stops, the sightings that wait for their minute.
	if err := mgr.Add(receiver); err != nil {
		return err
	}
	return campaignwebhook.SetupWithManager(mgr)
}
