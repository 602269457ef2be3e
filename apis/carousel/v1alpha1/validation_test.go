package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		{"token TTL too short", func(s *ClusterSpec) { s.KubeletBootstrap.TokenTTL = dur(time.Minute) }, "spec.kubeletBootstrap.tokenTTL"},
		{"token TTL too long", func(s *ClusterSpec) { s.KubeletBootstrap.TokenTTL = dur(30 * 24 * time.Hour) }, "spec.kubeletBootstrap.tokenTTL"},
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

// inPhase returns a valid cluster whose CA rotation is in phase, with the
// given pools pending.
func inPhase(phase CARotationPhase, pending ...string) *Cluster {
	c := validCluster()
	if phase == "" && len(pending) == 0 {
		return c
	}
	r := &CARotation{Phase: phase}
	for _, p := range pending {
		r.PendingWorkersRollouts = append(r.PendingWorkersRollouts, PendingWorkersRollout{Name: p})
	}
	c.Status.Credentials = &ClusterCredentials{Rotation: &CredentialsRotation{CertificateAuthorities: r}}
	return c
}

func withOperation(c *Cluster, op string) *Cluster {
	c = c.DeepCopy()
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[OperationAnnotation] = op
	return c
}

func TestValidateOperation(t *testing.T) {
	now := metav1.Now()
	deleting := inPhase(RotationPrepared)
	deleting.DeletionTimestamp = &now
	tests := []struct {
		name string
		old  *Cluster // nil: create
		op   string
		want string // substring of the error; empty means allowed
	}{
		{"start on create", nil, OperationStartCARotation, ""},
		{"start, never rotated", inPhase(""), OperationStartCARotation, ""},
		{"start after Completed", inPhase(RotationCompleted), OperationStartCARotation, ""},
		{"start while Preparing", inPhase(RotationPreparing), OperationStartCARotation,
			"cannot start a CA rotation: the rotation is in phase Preparing: wait until the phase is Prepared"},
		{"start while Prepared", inPhase(RotationPrepared), OperationStartCARotation,
			"cannot start a CA rotation: the rotation is in phase Prepared: complete it with carousel.dev/operation=complete-ca-rotation"},
		{"start while Finalizing", inPhase(RotationFinalizing), OperationStartCARotation,
			"in phase Finalizing: wait until the phase is Completed"},
		{"complete from Prepared", inPhase(RotationPrepared), OperationCompleteCARotation, ""},
		{"complete, never rotated", inPhase(""), OperationCompleteCARotation,
			"cannot complete the CA rotation in phase none (never rotated), only in phase Prepared: start one with carousel.dev/operation=start-ca-rotation"},
		{"complete on create", nil, OperationCompleteCARotation, "in phase none (never rotated)"},
		{"complete while Preparing", inPhase(RotationPreparing), OperationCompleteCARotation,
			"cannot complete the CA rotation in phase Preparing, only in phase Prepared: wait until the phase is Prepared"},
		{"complete while Finalizing", inPhase(RotationFinalizing), OperationCompleteCARotation, "in phase Finalizing"},
		{"complete after Completed", inPhase(RotationCompleted), OperationCompleteCARotation,
			"in phase Completed, only in phase Prepared: start one with"},
		{"reconcile any time", inPhase(RotationFinalizing), OperationReconcile, ""},
		{"unknown operation", inPhase(""), "rotate-everything", `unknown operation "rotate-everything"`},
		{"rollout of a pending pool", inPhase(RotationPreparing, "pool-b"), "rollout-workers=pool-b", ""},
		{"rollout of two pending pools", inPhase(RotationPreparing, "pool-a", "pool-b"), "rollout-workers=pool-a,pool-b", ""},
		{"rollout of an unknown pool", inPhase(RotationPreparing, "pool-b"), "rollout-workers=pool-z", `worker pool "pool-z" does not exist (phase Preparing): name pools from spec.workers`},
		{"rollout of a pool not pending", inPhase(RotationPreparing, "pool-b"), "rollout-workers=pool-a",
			`worker pool "pool-a" has no pending rollout in phase Preparing`},
		{"rollout with no rotation", inPhase(""), "rollout-workers=pool-a", "in phase none (never rotated)"},
		{"rollout naming a pool twice", inPhase(RotationPreparing, "pool-b"), "rollout-workers=pool-b,pool-b", `names worker pool "pool-b" twice`},
		{"rollout of nothing", inPhase(RotationPreparing, "pool-b"), "rollout-workers=", "names an empty worker pool"},
		{"reissue a CA, never rotated", inPhase(""), "reissue-ca=etcd", ""},
		{"reissue two CAs after Completed", inPhase(RotationCompleted), "reissue-ca=etcd,client", ""},
		{"reissue during a rotation", inPhase(RotationPrepared), "reissue-ca=etcd",
			"cannot reissue a CA during a CA rotation (phase Prepared): a lost CA Secret must be restored, for example with `kubectl carousel certs restore`"},
		{"reissue an unknown role", inPhase(""), "reissue-ca=etcd,dns", `names "dns", which is not a CA role`},
		{"reissue nothing", inPhase(""), "reissue-ca=", "names an empty CA role"},
		{"reissue a role twice", inPhase(""), "reissue-ca=vpn,vpn", `names CA role "vpn" twice`},
		{"any operation while deleting", deleting, OperationCompleteCARotation, "the cluster is being deleted"},
		{"unchanged annotation is not checked again", withOperation(inPhase(RotationPreparing), OperationStartCARotation), OperationStartCARotation, ""},
		{"changed annotation is checked", withOperation(inPhase(""), OperationStartCARotation), OperationCompleteCARotation, "in phase none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := tt.old
			if base == nil {
				base = validCluster()
			}
			assertValidation(t, errorsText(withOperation(base, tt.op), tt.old), tt.want)
		})
	}
}

func TestValidateSpecChangeDuringRotation(t *testing.T) {
	tests := []struct {
		name   string
		old    *Cluster
		mutate func(*ClusterSpec)
		want   string
	}{
		{"key algorithm during Preparing", inPhase(RotationPreparing), func(s *ClusterSpec) { s.Certificates.KeyAlgorithm = KeyAlgorithmRSA3072 },
			"spec.certificates: Forbidden: cannot change while the CA rotation is in phase Preparing: wait until the phase is Prepared"},
		{"CA validity during Prepared", inPhase(RotationPrepared), func(s *ClusterSpec) { s.Certificates.CAValidity = dur(1000 * time.Hour) },
			"in phase Prepared: complete it with"},
		{"explicit default is no change", inPhase(RotationPrepared), func(s *ClusterSpec) { s.Certificates.KeyAlgorithm = "" }, ""},
		{"key algorithm when Completed", inPhase(RotationCompleted), func(s *ClusterSpec) { s.Certificates.KeyAlgorithm = KeyAlgorithmRSA3072 }, ""},
		{"remove a pending pool", inPhase(RotationPreparing, "pool-b"), func(s *ClusterSpec) { s.Workers = s.Workers[:1] },
			`cannot remove worker pool "pool-b" while its rollout is pending in phase Preparing`},
		{"remove a rolled pool", inPhase(RotationPreparing, "pool-a"), func(s *ClusterSpec) { s.Workers = s.Workers[:1] }, ""},
		{"add a pool", inPhase(RotationFinalizing, "pool-a"), func(s *ClusterSpec) {
			s.Workers = append(s.Workers, WorkerPool{Name: "pool-d", RolloutStrategy: RolloutInPlace})
		}, ""},
		{"endpoint change", inPhase(RotationPreparing), func(s *ClusterSpec) { s.ControlPlane.Endpoint = "https://10.0.0.2:6443" }, ""},
		{"endpoint removed during Finalizing", inPhase(RotationFinalizing), func(s *ClusterSpec) { s.ControlPlane.Endpoint = "" },
			"spec.controlPlane.endpoint: Forbidden: cannot be removed while the CA rotation is in phase Finalizing: the rotation checks the API server at this endpoint"},
		{"endpoint removed when Completed", inPhase(RotationCompleted), func(s *ClusterSpec) { s.ControlPlane.Endpoint = "" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			newC := tt.old.DeepCopy()
			tt.mutate(&newC.Spec)
			assertValidation(t, errorsText(newC, tt.old), tt.want)
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
	old := inPhase(RotationPreparing)
	old.Spec.KubernetesVersion = "1.20.0" // valid once, outside the supported range now
	updated := old.DeepCopy()
	updated.Labels = map[string]string{"team": "a"}
	assertValidation(t, errorsText(updated, old), "")
	updated.Spec.KubernetesVersion = "1.20.1"
	assertValidation(t, errorsText(updated, old), "unsupported Kubernetes version")
}

func TestParseOperationRoundTrip(t *testing.T) {
	for _, v := range []string{OperationStartCARotation, OperationCompleteCARotation, OperationReconcile, "rollout-workers=a", "rollout-workers=a,b", "reissue-ca=etcd", "reissue-ca=client,vpn"} {
		op, err := ParseOperation(v)
		if err != nil {
			t.Fatalf("ParseOperation(%q): %v", v, err)
		}
		if op.String() != v {
			t.Fatalf("ParseOperation(%q).String() = %q", v, op.String())
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
