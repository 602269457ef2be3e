package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func validCluster() *Cluster {
	return &Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "team-a"},
		Spec: ClusterSpec{
			KubernetesVersion: "1.36.3",
			ControlPlane:      ControlPlaneSpec{Endpoint: "https://10.0.0.1:6443", ExtraSANs: []string{"api.example.com", "*.api.example.com", "192.0.2.10"}},
			Certificates:      CertificateSettings{KeyAlgorithm: KeyAlgorithmECDSAP256, CAValidity: dur(87600 * time.Hour), LeafValidity: dur(8760 * time.Hour)},
			Workers: []WorkerPool{
				{Name: "pool-a", RolloutStrategy: RolloutInPlace},
				{Name: "pool-b", RolloutStrategy: RolloutManual},
				{Name: "pool-c", RolloutStrategy: RolloutReplace, MachineDeployment: "prod-pool-c"},
			},
			KubeletBootstrap: KubeletBootstrapSpec{TokenTTL: dur(24 * time.Hour), CSRApproval: CSRApprovalPolicy{Client: ApprovalAuto, Serving: ApprovalManual}},
		},
	}
}

// assertValidation checks that got (from errorsText) is empty when want is,
// and otherwise contains want.
func assertValidation(t *testing.T, got, want string) {
	t.Helper()
	switch {
	case want == "" && got != "":
		t.Fatalf("want valid, got %s", got)
	case want != "" && !strings.Contains(got, want):
		t.Fatalf("want an error containing\n  %q\ngot\n  %q", want, got)
	}
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// errorsText validates c as created (old == nil) or updated from old and
// flattens the errors into one string; empty when c is valid.
func errorsText(c *Cluster, old *Cluster) string {
	errs := ValidateCluster(c)
	if old != nil {
		errs = ValidateClusterUpdate(c, old)
	}
	if agg := errs.ToAggregate(); agg != nil {
		return agg.Error()
	}
	return ""
}

func TestValidateClusterSpec(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*ClusterSpec)
		want   string // substring of the error; empty means valid
	}{
		{"valid", func(*ClusterSpec) {}, ""},
		{"minimal spec, defaults left to the schema", func(s *ClusterSpec) { *s = ClusterSpec{KubernetesVersion: "v1.32.0"} }, ""},
		{"pre-release of a supported minor", func(s *ClusterSpec) { s.KubernetesVersion = "1.37.0-rc.1" }, ""},
		{"version missing", func(s *ClusterSpec) { s.KubernetesVersion = "" }, "spec.kubernetesVersion: Required value"},
		{"version not semver", func(s *ClusterSpec) { s.KubernetesVersion = "latest" }, "not a semantic version"},
		{"version too old", func(s *ClusterSpec) { s.KubernetesVersion = "1.31.9" }, "unsupported Kubernetes version"},
		{"version too new", func(s *ClusterSpec) { s.KubernetesVersion = "1.38.0" }, "unsupported Kubernetes version"},
		{"endpoint http", func(s *ClusterSpec) { s.ControlPlane.Endpoint = "http://10.0.0.1:6443" }, "must be an https URL"},
		{"endpoint without host", func(s *ClusterSpec) { s.ControlPlane.Endpoint = "https://:6443" }, "must name a host"},
		{"endpoint with path", func(s *ClusterSpec) { s.ControlPlane.Endpoint = "https://api.example.com/k8s" }, "must not have a path"},
		{"endpoint with user", func(s *ClusterSpec) { s.ControlPlane.Endpoint = "https://me@api.example.com" }, "user information"},
		{"endpoint with query", func(s *ClusterSpec) { s.ControlPlane.Endpoint = "https://api.example.com?x=1" }, "query"},
		{"endpoint bad port", func(s *ClusterSpec) { s.ControlPlane.Endpoint = "https://api.example.com:70000" }, "port must be between"},
		{"endpoint IPv6", func(s *ClusterSpec) { s.ControlPlane.Endpoint = "https://[::1]:6443" }, ""},
		{"SAN not a name", func(s *ClusterSpec) { s.ControlPlane.ExtraSANs = []string{"not_a_name"} }, "neither an IP address nor a DNS name"},
		{"SAN bad wildcard", func(s *ClusterSpec) { s.ControlPlane.ExtraSANs = []string{"*.*.example.com"} }, "spec.controlPlane.extraSANs[0]"},
		{"SAN duplicate", func(s *ClusterSpec) { s.ControlPlane.ExtraSANs = []string{"a.example", "a.example"} }, "Duplicate value"},
		{"unknown key algorithm", func(s *ClusterSpec) { s.Certificates.KeyAlgorithm = "DSA-1024" }, "spec.certificates.keyAlgorithm: Unsupported value"},
		{"automatic rotation without a maintenance window", func(s *ClusterSpec) {
			s.Maintenance, s.CARotation.Automatic = nil, &AutomaticCARotation{}
		}, "spec.maintenance: Required value: spec.caRotation.automatic starts and completes rotations only inside the maintenance window"},
		{"automatic rotation in the maintenance window", func(s *ClusterSpec) {
			s.Maintenance = &MaintenanceSpec{TimeWindow: MaintenanceTimeWindow{Begin: "220000+0000", End: "230000+0000"}}
			s.CARotation.Automatic = &AutomaticCARotation{ValidityUsedPercent: ptr.To[int32](99), Interval: &metav1.Duration{Duration: time.Hour},
				CompleteAfter: &metav1.Duration{}}
		}, ""},
		{"automatic rotation at no share of the validity", func(s *ClusterSpec) {
			s.Maintenance = &MaintenanceSpec{}
			s.CARotation.Automatic = &AutomaticCARotation{ValidityUsedPercent: ptr.To[int32](0)}
		}, "spec.caRotation.automatic.validityUsedPercent: Invalid value: 0: must be between 1 and 99"},
		{"automatic rotation every minute", func(s *ClusterSpec) {
			s.Maintenance = &MaintenanceSpec{}
			s.CARotation.Automatic = &AutomaticCARotation{Interval: &metav1.Duration{Duration: time.Minute}}
		}, "spec.caRotation.automatic.interval: Invalid value: \"1m0s\": must be between 1h0m0s and"},
		{"automatic completion after a year", func(s *ClusterSpec) {
			s.Maintenance = &MaintenanceSpec{}
			s.CARotation.Automatic = &AutomaticCARotation{CompleteAfter: &metav1.Duration{Duration: 365 * 24 * time.Hour}}
		}, "spec.caRotation.automatic.completeAfter: Invalid value: \"8760h0m0s\": must be between 0s and 2160h0m0s"},
		{"CA validity too short", func(s *ClusterSpec) { s.Certificates.CAValidity = dur(time.Hour) }, "spec.certificates.caValidity"},
		{"CA validity too long", func(s *ClusterSpec) { s.Certificates.CAValidity = dur(40 * 365 * 24 * time.Hour) }, "must be between"},
		{"leaf validity too short", func(s *ClusterSpec) { s.Certificates.LeafValidity = dur(time.Minute) }, "spec.certificates.leafValidity"},
		{"leaf outlives CA", func(s *ClusterSpec) {
			s.Certificates.CAValidity = dur(48 * time.Hour)
			s.Certificates.LeafValidity = dur(72 * time.Hour)
		}, "must be shorter than the CA validity"},
		{"leaf outlives default CA validity", func(s *ClusterSpec) {
			s.Certificates.CAValidity = nil
			s.Certificates.LeafValidity = dur(MaxLeafValidity)
		}, ""},
		{"pool name invalid", func(s *ClusterSpec) { s.Workers[0].Name = "Pool_A" }, "spec.workers[0].name"},
		{"pool name duplicate", func(s *ClusterSpec) { s.Workers[1].Name = "pool-a" }, "spec.workers[1].name: Duplicate value"},
		{"unknown strategy", func(s *ClusterSpec) { s.Workers[0].RolloutStrategy = "Sometimes" }, "spec.workers[0].rolloutStrategy: Unsupported value"},
		{"replace without machine deployment", func(s *ClusterSpec) { s.Workers[2].MachineDeployment = "" }, "spec.workers[2].machineDeployment: Required value"},
		{"machine deployment without replace", func(s *ClusterSpec) { s.Workers[0].MachineDeployment = "md" }, "spec.workers[0].machineDeployment: Forbidden"},
		{"machine deployment bad name", func(s *ClusterSpec) { s.Workers[2].MachineDeployment = "Bad Name" }, "spec.workers[2].machineDeployment: Invalid value"},
		{"in-place settings", func(s *ClusterSpec) {
			s.Workers[0].MaxUnavailable = ptr.To(intstr.FromString("100%"))
			s.Workers[0].OfflineNodeTimeout = dur(MinOfflineNodeTimeout)
		}, ""},
		{"in-place settings on the default strategy", func(s *ClusterSpec) {
			s.Workers[0].RolloutStrategy = ""
			s.Workers[0].MaxUnavailable = ptr.To(intstr.FromInt32(3))
		}, ""},
		{"max unavailable zero", func(s *ClusterSpec) { s.Workers[0].MaxUnavailable = ptr.To(intstr.FromInt32(0)) }, "spec.workers[0].maxUnavailable: Invalid value: 0: must be at least 1"},
		{"max unavailable 0%", func(s *ClusterSpec) { s.Workers[0].MaxUnavailable = ptr.To(intstr.FromString("0%")) }, "spec.workers[0].maxUnavailable: Invalid value"},
		{"max unavailable over 100%", func(s *ClusterSpec) { s.Workers[0].MaxUnavailable = ptr.To(intstr.FromString("101%")) }, "a percentage between 1% and 100%"},
		{"max unavailable not a percentage", func(s *ClusterSpec) { s.Workers[0].MaxUnavailable = ptr.To(intstr.FromString("half")) }, "spec.workers[0].maxUnavailable: Invalid value"},
		{"max unavailable with a leading zero", func(s *ClusterSpec) { s.Workers[0].MaxUnavailable = ptr.To(intstr.FromString("050%")) }, "spec.workers[0].maxUnavailable: Invalid value"},
		{"max unavailable for Manual", func(s *ClusterSpec) { s.Workers[1].MaxUnavailable = ptr.To(intstr.FromInt32(1)) }, "spec.workers[1].maxUnavailable: Forbidden"},
		{"offline timeout too short", func(s *ClusterSpec) { s.Workers[0].OfflineNodeTimeout = dur(59 * time.Second) }, "spec.workers[0].offlineNodeTimeout: Invalid value"},
		{"offline timeout too long", func(s *ClusterSpec) { s.Workers[0].OfflineNodeTimeout = dur(MaxOfflineNodeTimeout + time.Hour) }, "must be between"},
		{"offline timeout for Replace", func(s *ClusterSpec) { s.Workers[2].OfflineNodeTimeout = dur(time.Hour) }, "spec.workers[2].offlineNodeTimeout: Forbidden"},
		{"token TTL too short", func(s *ClusterSpec) { s.KubeletBootstrap.TokenTTL = dur(time.Minute) }, "spec.kubeletBootstrap.tokenTTL"},
		{"token TTL too long", func(s *ClusterSpec) { s.KubeletBootstrap.TokenTTL = dur(30 * 24 * time.Hour) }, "spec.kubeletBootstrap.tokenTTL"},
		{"workloads that never reload trust", func(s *ClusterSpec) { s.CARotation.WorkloadTrustReload = dur(0) }, ""},
		{"workload trust reload at most an hour", func(s *ClusterSpec) { s.CARotation.WorkloadTrustReload = dur(MaxWorkloadTrustReload) }, ""},
		{"workload trust reload negative", func(s *ClusterSpec) { s.CARotation.WorkloadTrustReload = dur(-time.Second) }, "spec.caRotation.workloadTrustReload: Invalid value"},
		{"workload token refresh above a day", func(s *ClusterSpec) { s.ServiceAccountKeyRotation.WorkloadTokenRefresh = dur(26 * time.Hour) },
			"spec.serviceAccountKeyRotation.workloadTokenRefresh: Invalid value"},
		{"workload trust reload too long", func(s *ClusterSpec) { s.CARotation.WorkloadTrustReload = dur(2 * time.Hour) }, "must be between 0s and 1h0m0s"},
		{"unknown client approval", func(s *ClusterSpec) { s.KubeletBootstrap.CSRApproval.Client = "Maybe" }, "spec.kubeletBootstrap.csrApproval.client: Unsupported value"},
		{"unknown serving approval", func(s *ClusterSpec) { s.KubeletBootstrap.CSRApproval.Serving = "Maybe" }, "spec.kubeletBootstrap.csrApproval.serving: Unsupported value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validCluster()
			tt.mutate(&c.Spec)
			assertValidation(t, errorsText(c, nil), tt.want)
		})
	}
}

func TestValidateClusterName(t *testing.T) {
	c := validCluster()
	c.Name = "prod.eu-1"
	assertValidation(t, errorsText(c, nil), "metadata.name: Invalid value")
	c.Name = strings.Repeat("a", 64)
	assertValidation(t, errorsText(c, nil), "metadata.name")
}

func TestUpdateWithoutSpecChangeIsNotRefusedForTheSpec(t *testing.T) {
	old := validCluster()
	old.Spec.KubernetesVersion = "1.20.0" // valid once, outside the supported range now
	updated := old.DeepCopy()
	updated.Labels = map[string]string{"team": "a"}
	assertValidation(t, errorsText(updated, old), "")
	updated.Spec.KubernetesVersion = "1.20.1"
	assertValidation(t, errorsText(updated, old), "unsupported Kubernetes version")
}

// An update that keeps a kubernetesVersion no longer supported is not refused
// for it: it does not block a change elsewhere in the spec.
func TestAnUnchangedUnsupportedVersionDoesNotBlockAnUpdate(t *testing.T) {
	old := validCluster()
	old.Spec.KubernetesVersion = "1.20.0" // valid once, outside the supported range now
	updated := old.DeepCopy()
	updated.Spec.ControlPlane.Endpoint = "https://10.0.0.2:6443"
	assertValidation(t, errorsText(updated, old), "")
	updated.Spec.ControlPlane.Endpoint = "http://10.0.0.2:6443"
	got := errorsText(updated, old)
	assertValidation(t, got, "spec.controlPlane.endpoint")
	if strings.Contains(got, "kubernetesVersion") {
		t.Errorf("an update of the endpoint refused for the stored kubernetesVersion too: %s", got)
	}
	updated = old.DeepCopy()
	updated.Spec.KubernetesVersion = "latest"
	assertValidation(t, errorsText(updated, old), "not a semantic version")

	// Only the kubernetesVersion left as it was: another field invalid in the
	// stored spec (written while the webhook failed open) is refused, and so
	// is a change that the check of that field covered (a leaf validity past
	// a CA validity too short).
	old = validCluster()
	old.Spec.Certificates.CAValidity = dur(time.Hour)
	updated = old.DeepCopy()
	updated.Spec.Certificates.LeafValidity = dur(48 * time.Hour)
	assertValidation(t, errorsText(updated, old), "spec.certificates.caValidity")
}

func TestParseOperationRoundTrip(t *testing.T) {
	for _, v := range []string{OperationStartCARotation, OperationCompleteCARotation, OperationAbortCARotation, OperationReconcile, "rollout-workers=a", "rollout-workers=a,b", "reissue-ca=etcd", "reissue-ca=client,vpn",
		OperationStartCARotationWithoutWorkersRollout, "rotate-rollout-workers=a", "rotate-rollout-workers=b,a",
		"complete-ca-rotation=force", "rotate-credentials-complete=force"} {
		op, err := ParseOperation(v)
		if err != nil {
			t.Fatalf("ParseOperation(%q): %v", v, err)
		}
		if op.String() != v {
			t.Fatalf("ParseOperation(%q).String() = %q", v, op.String())
		}
	}
}

func TestOnlyCompletionsAndAbortsAreForced(t *testing.T) {
	for _, v := range []string{"start-ca-rotation=force", "reconcile=force", "complete-ca-rotation=forced", "complete-ca-rotation=force=force", "abort-ca-rotation=force=force"} {
		if op, err := ParseOperation(v); err == nil {
			t.Errorf("ParseOperation(%q) = %+v, want an error", v, op)
		}
	}
	for value, verb := range map[string]OperationVerb{"complete-ca-rotation=force": VerbCompleteCARotation, "abort-ca-rotation=force": VerbAbortCARotation,
		"rotate-credentials-complete=force": VerbRotateCredentialsComplete} {
		if op, _ := ParseOperation(value); !op.Force || op.Verb != verb || op.String() != value {
			t.Errorf("%s parsed as %+v", value, op)
		}
	}
}

func TestCARolesAreDistinctAndComplete(t *testing.T) {
	seen := map[CARole]bool{}
	for _, r := range CARoles() {
		if seen[r] {
			t.Fatalf("role %q listed twice", r)
		}
		seen[r] = true
	}
	for _, want := range []CARole{"cluster", "client", "kubelet", "etcd", "front-proxy", "metrics-server", "vpn"} {
		if !seen[want] {
			t.Fatalf("role %q missing", want)
		}
	}
}
