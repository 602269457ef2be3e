package operator

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(*Options)
		want   string // substring of the error; empty means valid
	}{
		{"the defaults", func(*Options) {}, ""},
		{"eight Clusters at once", func(o *Options) { o.ClusterConcurrency = 8 }, ""},
		{"no memory limit", func(o *Options) { o.MemoryLimitRatio = 0 }, ""},
		{"all of the memory limit", func(o *Options) { o.MemoryLimitRatio = 1 }, ""},
		{"more than the memory limit", func(o *Options) { o.MemoryLimitRatio = 1.5 }, "--memory-limit-ratio=1.5: a share of the memory limit from 0 (none) to 1"},
		{"a negative share of the memory limit", func(o *Options) { o.MemoryLimitRatio = -0.1 }, "--memory-limit-ratio=-0.1"},
		{"no Cluster at once", func(o *Options) { o.ClusterConcurrency = 0 }, "--cluster-concurrency=0: reconcile at least one Cluster at a time"},
		{"negative Clusters at once", func(o *Options) { o.ClusterConcurrency = -2 }, "--cluster-concurrency=-2"},
		{"one CSR at once", func(o *Options) { o.CSRConcurrency = 1 }, ""},
		{"no CSR at once", func(o *Options) { o.CSRConcurrency = 0 }, "--csr-concurrency=0: handle at least one CSR at a time"},
		{"a slow managed client", func(o *Options) { o.ManagedQPS, o.ManagedBurst = 5, 10 }, ""},
		{"a managed client that may send nothing", func(o *Options) { o.ManagedQPS = 0 }, "--managed-kube-api-qps=0 --managed-kube-api-burst=1000: both must be positive"},
		{"no burst", func(o *Options) { o.ManagedBurst = 0 }, "--managed-kube-api-burst=0"},
		{"a managed client of NaN requests a second", func(o *Options) { o.ManagedQPS = float32(math.NaN()) }, "--managed-kube-api-qps=NaN"},
		{"a managed client of infinite requests a second", func(o *Options) { o.ManagedQPS = float32(math.Inf(1)) }, "--managed-kube-api-qps=+Inf"},
		{"NaN of the memory limit", func(o *Options) { o.MemoryLimitRatio = math.NaN() }, "--memory-limit-ratio=NaN"},
		{"no timeout of requests to managed API servers", func(o *Options) { o.EvidenceTimeout = -10 * time.Second }, "--evidence-timeout=-10s: must be positive"},
		{"APIServices never looked at again", func(o *Options) { o.APIServiceResync = -time.Minute }, "--apiservice-resync=-1m0s: must be positive"},
		{"a deleted Cluster released at once", func(o *Options) { o.ManagedCleanupTimeout = -time.Second }, "--managed-cleanup-timeout=-1s"},
		{"no warning before a CA expires", func(o *Options) { o.CAExpiryWarning = 0 }, "--ca-expiry-warning=0s"},
		{"no poll of a managed cluster", func(o *Options) { o.ManagedPollInterval = 0 }, "--managed-poll-interval=0s"},
		{"no longest poll of a managed cluster", func(o *Options) { o.MaxManagedPollInterval = -time.Second }, "--max-managed-poll-interval=-1s"},
		{"no rotation recommended", func(o *Options) { o.Recommendations.RotationInterval = 0 }, ""},
		{"a rotation recommended before it is due", func(o *Options) { o.Recommendations.RotationInterval = -time.Hour }, "--ca-rotation-interval=-1h0m0s: 0 (off) or positive"},
		{"a Prepared rotation urged at once", func(o *Options) { o.Recommendations.PreparedWarning = -time.Hour }, "--ca-rotation-prepared-warning=-1h0m0s"},
		{"an audit webhook", func(o *Options) {
			o.AuditWebhookURL, o.AuditWebhookCAFile = "https://carousel-webhook.carousel-system.svc:443/audit", "/etc/carousel/audit/ca.crt"
		}, ""},
		{"an audit webhook over plain HTTP", func(o *Options) { o.AuditWebhookURL, o.AuditWebhookCAFile = "http://carousel/audit", "/ca.crt" },
			`--audit-webhook-url="http://carousel/audit": an https URL`},
		{"an audit webhook behind a proxy that strips a prefix", func(o *Options) {
			o.AuditWebhookURL, o.AuditWebhookCAFile = "https://gateway.example:8443/carousel/audit/", "/ca.crt"
		}, ""},
		{"an audit webhook URL without the receiver's path", func(o *Options) { o.AuditWebhookURL, o.AuditWebhookCAFile = "https://carousel:443", "/ca.crt" },
			`--audit-webhook-url="https://carousel:443": its path must end in /audit`},
		{"an audit webhook URL with another path", func(o *Options) { o.AuditWebhookURL, o.AuditWebhookCAFile = "https://carousel/auditing", "/ca.crt" },
			"its path must end in /audit"},
		{"an audit webhook URL with a query", func(o *Options) { o.AuditWebhookURL, o.AuditWebhookCAFile = "https://carousel/audit?x=1", "/ca.crt" },
			"its path must end in /audit"},
		{"an audit webhook without its CA", func(o *Options) { o.AuditWebhookURL = "https://carousel/audit" }, "needs --audit-webhook-ca-file"},
		{"an audit webhook without the webhook server", func(o *Options) {
			o.AuditWebhookURL, o.AuditWebhookCAFile, o.Webhook = "https://carousel/audit", "/ca.crt", false
		}, "needs --webhook=true"},
		{"kubelet certificates shorter than a CSR may ask for (the e2e suite's, to see kubelets renew)", func(o *Options) { o.CSRMaxDuration = 4 * time.Minute }, ""},
		{"no kubelet certificate validity", func(o *Options) { o.CSRMaxDuration = 0 }, "--csr-max-duration=0s: must be positive"},
		{"a negative kubelet certificate validity", func(o *Options) { o.CSRMaxDuration = -time.Hour }, "--csr-max-duration=-1h0m0s"},
		{"no old-CA usage window", func(o *Options) { o.OldCAUsageWindow = 0 }, "--old-ca-usage-window=0s: must be positive"},
		{"an old-CA usage window of a day", func(o *Options) { o.OldCAUsageWindow = 24 * time.Hour }, ""},
		{"an old-CA usage window longer than the record keeps a use", func(o *Options) { o.OldCAUsageWindow = 48 * time.Hour },
			"--old-ca-usage-window=48h0m0s: at most 24h58m0s"},
		{"a shard Lease of 15s", func(o *Options) { o.Shard.ControllerRing, o.Shard.LeaseDuration = "fleet", 15*time.Second }, ""},
		{"a shard Lease shorter than a second", func(o *Options) { o.Shard.ControllerRing, o.Shard.LeaseDuration = "fleet", 500*time.Millisecond },
			"--shard-lease-duration=500ms: a whole number of seconds, at least 1s"},
		{"a shard Lease of no time", func(o *Options) { o.Shard.ControllerRing, o.Shard.LeaseDuration = "fleet", 0 }, "--shard-lease-duration=0s: a whole number of seconds"},
		{"a shard of the default Lease", func(o *Options) { o.Shard.ControllerRing = "fleet" }, ""},
		{"a shard Lease of a fraction of seconds", func(o *Options) { o.Shard.ControllerRing, o.Shard.LeaseDuration = "fleet", 1500*time.Millisecond },
			"--shard-lease-duration=1.5s"},
		{"every error at once", func(o *Options) { o.ClusterConcurrency, o.CSRConcurrency = 0, 0 }, "--cluster-concurrency=0: reconcile at least one Cluster at a time\n--csr-concurrency=0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := DefaultOptions()
			tt.change(&opts)
			err := opts.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}
