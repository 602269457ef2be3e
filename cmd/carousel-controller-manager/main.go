// Command carousel-controller-manager runs Carousel's controllers and its
// admission webhook against a management cluster.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/carousel-dev/carousel/pkg/operator"
	"github.com/carousel-dev/carousel/pkg/scheme"
	"github.com/carousel-dev/carousel/pkg/sharding"
	"github.com/carousel-dev/carousel/pkg/version"
	clusterwebhook "github.com/carousel-dev/carousel/pkg/webhook/cluster"
	"github.com/carousel-dev/carousel/pkg/webhook/servingcert"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "check-webhook" {
		os.Exit(checkWebhook(os.Args[2:]))
	}
	opts := operator.DefaultOptions()
	var (
		metricsAddr, metricsCertDir, probeAddr, pprofAddr, leaderElectionNamespace, webhookHost string
		leaderElect, metricsSecure                                                              bool
		webhookPort                                                                             int
		managedQPS                                                                              float64
		webhookCert                                                                             operator.WebhookCertificate
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "Address the Prometheus metrics endpoint binds to; \"0\" disables it.")
	flag.BoolVar(&metricsSecure, "metrics-secure", true, "Serve the metrics over HTTPS, only to a bearer token the API server authenticates and authorizes to get /metrics; false serves plain HTTP to anyone.")
	flag.StringVar(&metricsCertDir, "metrics-cert-dir", "", "Directory with the metrics endpoint's tls.crt and tls.key (with --metrics-secure); empty means the self-issued webhook certificate (with --webhook-cert-secret), else a self-signed one.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "0", "Address Go's /debug/pprof profiles are served on, plain HTTP without authentication: bind it to loopback; \"0\" disables it.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease; defaults to the Pod's namespace.")
	flag.StringVar(&opts.Shard.ControllerRing, "shard-controller-ring", "", "Run as a shard of this ControllerRing of the kubernetes-controller-sharding sharder: reconcile only the Clusters and RotationCampaigns it assigns to this shard, holding the shard Lease instead of electing a leader (excludes --leader-elect).")
	flag.StringVar(&opts.Shard.Name, "shard-name", "", "Name of this shard (its Lease and the value of the shard label); defaults to the host name, the Pod's name.")
	flag.StringVar(&opts.Shard.LeaseNamespace, "shard-lease-namespace", "", "Namespace of the shard Lease; defaults to the Pod's namespace.")
	flag.DurationVar(&opts.Shard.LeaseDuration, "shard-lease-duration", sharding.DefaultLeaseDuration, "How long the shard Lease lasts without a renewal; the sharder moves a dead shard's Clusters once it has been expired as long again.")
	flag.BoolVar(&opts.Webhook, "webhook", opts.Webhook, "Serve the admission webhooks of Clusters and RotationCampaigns.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Port the admission webhook listens on.")
	flag.StringVar(&webhookHost, "webhook-host", "", "Address the admission webhook binds to; empty means every interface.")
	flag.StringVar(&webhookCert.CertDir, "webhook-cert-dir", "", "Directory with the webhook's tls.crt and tls.key, kept current by something else (cert-manager); defaults to <tmp>/k8s-webhook-server/serving-certs.")
	flag.StringVar(&webhookCert.Secret, "webhook-cert-secret", "", "NAMESPACE/NAME of the Secret in which Carousel keeps a CA and serving certificate it issues and renews for its own webhook; excludes --webhook-cert-dir.")
	flag.StringVar(&webhookCert.Configuration, "webhook-configuration", "", "ValidatingWebhookConfiguration whose webhooks get the self-issued CA bundle (with --webhook-cert-secret).")
	flag.DurationVar(&webhookCert.TrustPropagation, "webhook-trust-propagation", 0, "How long a renewed self-issued CA is trusted before the served certificate moves to it (with --webhook-cert-secret); 0 means a minute, or 720h with --audit-webhook-url: managed API servers read their audit kubeconfig's CA bundle only when they start, and must roll within it.")
	flag.Func("webhook-dns-names", "Comma-separated names of the self-issued serving certificate (with --webhook-cert-secret): the webhook Service's DNS names, and the host of --audit-webhook-url, a DNS name or an IP address.", func(v string) error {
		webhookCert.DNSNames = strings.Split(v, ",")
		return nil
	})
	flag.DurationVar(&opts.CAExpiryWarning, "ca-expiry-warning", opts.CAExpiryWarning, "How long before a CA expires the CAExpiringSoon condition turns True.")
	flag.DurationVar(&opts.Recommendations.RotationInterval, "ca-rotation-interval", opts.Recommendations.RotationInterval,
		"How long after the last completed CA rotation (or the Cluster's creation, if never rotated) CARotationRecommended turns True and the webhook warns; 0 turns it off.")
	flag.DurationVar(&opts.Recommendations.PreparedWarning, "ca-rotation-prepared-warning", opts.Recommendations.PreparedWarning,
		"How long a CA rotation may stay Prepared before CARotationRecommended turns True and the webhook warns, urging its completion; 0 turns it off.")
	flag.DurationVar(&opts.ManagedPollInterval, "managed-poll-interval", opts.ManagedPollInterval, "How soon a rotation waiting on a managed cluster (API-server evidence, node renewals) looks again.")
	flag.DurationVar(&opts.MaxManagedPollInterval, "max-managed-poll-interval", opts.MaxManagedPollInterval, "Longest wait between two looks at a managed cluster whose API server keeps failing (the poll interval backs off up to it).")
	flag.DurationVar(&opts.ManagedCleanupTimeout, "managed-cleanup-timeout", opts.ManagedCleanupTimeout, "How long a deleted Cluster waits for Carousel to remove its bootstrap tokens, RBAC and cluster-info from the managed cluster before it is released anyway.")
	flag.DurationVar(&opts.APIServiceResync, "apiservice-resync", opts.APIServiceResync, "How often the APIServices labelled carousel.dev/ca-bundle in each managed cluster are looked at again (a new one gets its caBundle within this time).")
	flag.DurationVar(&opts.EvidenceTimeout, "evidence-timeout", opts.EvidenceTimeout, "Timeout of each check of a managed API server for a rotation's evidence.")
	flag.BoolVar(&opts.CSRControllers, "csr-controllers", opts.CSRControllers, "Approve and sign kubelet CSRs in the managed clusters; false leaves them to an administrator.")
	flag.DurationVar(&opts.CSRMaxDuration, "csr-max-duration", opts.CSRMaxDuration, "Longest validity of a kubelet certificate Carousel signs; a CSR's expirationSeconds may ask for less.")
	flag.IntVar(&opts.CSRConcurrency, "csr-concurrency", opts.CSRConcurrency, "How many kubelet CSRs are approved and signed at once, across every managed cluster.")
	flag.Float64Var(&managedQPS, "managed-kube-api-qps", float64(opts.ManagedQPS), "Requests per second each connection to a managed cluster may send its API server (a CSR costs two writes).")
	flag.IntVar(&opts.ManagedBurst, "managed-kube-api-burst", opts.ManagedBurst, "Burst of requests each connection to a managed cluster may send above --managed-kube-api-qps.")
	flag.IntVar(&opts.ClusterConcurrency, "cluster-concurrency", opts.ClusterConcurrency, "How many Clusters are reconciled at once by the Cluster controller, and by each controller that reaches managed clusters (kubelet bootstrap, APIService bundles); one Cluster is never reconciled twice at once.")
	flag.Float64Var(&opts.MemoryLimitRatio, "memory-limit-ratio", opts.MemoryLimitRatio,
		"Share of the container's memory limit (its cgroup's) under which the Go runtime keeps the process, collecting garbage more often as it nears it; 0 sets none. GOMEMLIMIT in the environment takes precedence.")
	flag.StringVar(&opts.AuditWebhookURL, "audit-webhook-url", "", "Base URL at which managed API servers reach this manager's webhook server to send their audit events (https://<webhook Service>:443/audit): every Cluster then gets a Secret <cluster>-audit-webhook with the kubeconfig for kube-apiserver's --audit-webhook-config-file, which the old-CA usage gate learns from. Empty keeps no such Secrets.")
	flag.StringVar(&opts.AuditWebhookCAFile, "audit-webhook-ca-file", "", "PEM bundle with which managed API servers verify the webhook server's certificate (with --audit-webhook-url).")
	flag.DurationVar(&opts.OldCAUsageWindow, "old-ca-usage-window", opts.OldCAUsageWindow, "How recent a use of a client certificate from the old client CA must be for the old-CA usage gate to refuse complete-ca-rotation.")
	printVersion := flag.Bool("version", false, "Print the version and exit.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	opts.ManagedQPS = float32(managedQPS)
	if *printVersion {
		fmt.Println("carousel-controller-manager", version.Get())
		return
	}
	// Bad flags are said in plain lines, as the flag package says its own.
	var shardFlags error
	if leaderElect && opts.Shard.Enabled() {
		shardFlags = errors.New("--leader-elect with --shard-controller-ring: a shard holds its shard Lease instead of electing a leader; drop --leader-elect")
	}
	if err := errors.Join(webhookCert.Validate(opts.Webhook), webhookCert.ValidateAuditWebhookURL(opts.AuditWebhookURL), opts.Validate(), shardFlags); err != nil {
		fmt.Fprintf(os.Stderr, "carousel-controller-manager: invalid flags:\n%v\n", err)
		os.Exit(2)
	}
	ctrl.SetLogger(newLogger(&zapOpts))
	log := ctrl.Log.WithName("setup")
	info := version.Get()
	log.Info("starting carousel-controller-manager", "version", info.Version, "revision", info.Revision, "go", info.GoVersion)
	if limit, err := operator.SetMemoryLimit(opts.MemoryLimitRatio, memlimit.FromCgroup); err != nil {
		log.Error(err, "setting the Go memory limit from the container's; going on without")
	} else if limit != math.MaxInt64 {
		log.Info("Go memory limit", "bytes", limit)
	}

	mgrOpts := operator.ManagerOptions()
	mgrOpts.HealthProbeBindAddress = probeAddr
	mgrOpts.PprofBindAddress = pprofAddr
	mgrOpts.LeaderElection = leaderElect
	mgrOpts.LeaderElectionID = operator.LeaderElectionID
	mgrOpts.LeaderElectionNamespace = leaderElectionNamespace
	webhookOpts := webhook.Options{Host: webhookHost, Port: webhookPort, CertDir: webhookCert.CertDir}
	var rotator *servingcert.Rotator
	var selfIssued func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	if opts.Webhook && webhookCert.SelfIssued() {
		rotator = webhookCert.Rotator(opts.AuditWebhookURL != "")
		mgrOpts.WebhookServer = rotator.NewServer(webhookOpts)
		selfIssued = rotator.GetCertificate
	} else {
		mgrOpts.WebhookServer = webhook.NewServer(webhookOpts)
	}
	mgrOpts.Metrics = operator.MetricsServerOptions(metricsAddr, metricsSecure, metricsCertDir, selfIssued)
	cfg := ctrl.GetConfigOrDie()
	if err := opts.Shard.ConfigureManager(cfg, &mgrOpts); err != nil {
		log.Error(err, "setting up the shard")
		os.Exit(1)
	}
	if opts.Shard.Enabled() {
		log.Info("running as a shard", "controllerRing", opts.Shard.ControllerRing, "shard", opts.Shard.Name)
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}
	if err := operator.Setup(mgr, opts); err != nil {
		log.Error(err, "setting up the controllers")
		os.Exit(1)
	}
	if rotator != nil {
		rotator.UseManager(mgr)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "adding the health check")
		os.Exit(1)
	}
	readyz := healthz.Ping
	if opts.Webhook {
		readyz = mgr.GetWebhookServer().StartedChecker()
	}
	if err := mgr.AddReadyzCheck("readyz", readyz); err != nil {
		log.Error(err, "adding the readiness check")
		os.Exit(1)
	}
	log.Info("starting the manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "running the manager")
		os.Exit(1)
	}
}

// checkWebhook is `carousel-controller-manager check-webhook`, what the Helm chart's test Pod runs: it proves
// that the Cluster admission webhook answers (clusterwebhook.Check) and exits 0, or says why not and exits 1;
// it exits 2 on a bad flag.
func checkWebhook(args []string) int {
	flags := flag.NewFlagSet("check-webhook", flag.ContinueOnError)
	namespace := flags.String("namespace", "default", "Namespace of the dry-run Cluster.")
	kubeconfig := flags.String("kubeconfig", "", "Kubeconfig of the cluster; empty means the Pod's ServiceAccount.")
	timeout := flags.Duration("timeout", time.Minute, "How long to wait for the answer.")
	if err := flags.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	if *timeout <= 0 {
		// context.WithTimeout would give up before the first request.
		fmt.Fprintf(os.Stderr, "check-webhook: --timeout=%s: must be positive\n", *timeout)
		return 2
	}
	cfg, err := checkWebhookConfig(*kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "check-webhook:", err)
		return 1
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "check-webhook:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := clusterwebhook.Check(ctx, c, *namespace); err != nil {
		fmt.Fprintln(os.Stderr, "check-webhook:", err)
		return 1
	}
	fmt.Println("check-webhook: the Cluster admission webhook answers: it refused a Cluster with an unsupported Kubernetes version")
	return 0
}

// checkWebhookConfig is the client configuration of check-webhook: the
// kubeconfig at path, or else the one KUBECONFIG (or ~/.kube/config) names,
// or else the Pod's ServiceAccount, as client-go's loading rules go.
func checkWebhookConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
}
