package rotation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// validCluster is a Cluster the API package's validation accepts.
func validCluster() *v1alpha1.Cluster {
	return &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "team-a"},
		Spec: v1alpha1.ClusterSpec{
			KubernetesVersion: "1.36.3",
			ControlPlane:      v1alpha1.ControlPlaneSpec{Endpoint: "https://10.0.0.1:6443"},
			Certificates:      v1alpha1.CertificateSettings{KeyAlgorithm: v1alpha1.KeyAlgorithmECDSAP256, CAValidity: dur(87600 * time.Hour), LeafValidity: dur(8760 * time.Hour)},
			Workers: []v1alpha1.WorkerPool{
				{Name: "pool-a", RolloutStrategy: v1alpha1.RolloutInPlace},
				{Name: "pool-b", RolloutStrategy: v1alpha1.RolloutManual},
				{Name: "pool-c", RolloutStrategy: v1alpha1.RolloutReplace, MachineDeployment: "prod-pool-c"},
			},
		},
	}
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// errorsText validates c as the webhook does, created (old == nil) or
// updated from old, and flattens the errors into one string; empty when c
// is valid.
func errorsText(c *v1alpha1.Cluster, old *v1alpha1.Cluster) string {
	errs := append(v1alpha1.ValidateCluster(c), ValidateOperation(c, nil)...)
	if old != nil {
		errs = append(v1alpha1.ValidateClusterUpdate(c, old), ValidateUpdate(c, old)...)
	}
	if agg := errs.ToAggregate(); agg != nil {
		return agg.Error()
	}
	return ""
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

// TestAnEndpointRemovedDuringBothRotationsIsRefusedOnce: one refusal, the
// CA rotation's, when both rotations would refuse it.
func TestAnEndpointRemovedDuringBothRotationsIsRefusedOnce(t *testing.T) {
	old := keyInPhase(inPhase(v1alpha1.RotationPreparing), v1alpha1.ServiceAccountKeyPreparing)
	newC := old.DeepCopy()
	newC.Spec.ControlPlane.Endpoint = ""
	errs := validateSpecChange(newC, old)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "cannot be removed while the CA rotation is in phase Preparing") {
		t.Fatalf("errors %v, want the CA rotation's refusal alone", errs)
	}
}

// keyInPhase is c with a service-account key rotation in phase.
func keyInPhase(c *v1alpha1.Cluster, phase v1alpha1.ServiceAccountKeyRotationPhase) *v1alpha1.Cluster {
	c = c.DeepCopy()
	if c.Status.Credentials == nil {
		c.Status.Credentials = &v1alpha1.ClusterCredentials{}
	}
	if c.Status.Credentials.Rotation == nil {
		c.Status.Credentials.Rotation = &v1alpha1.CredentialsRotation{}
	}
	c.Status.Credentials.Rotation.ServiceAccountKey = &v1alpha1.ServiceAccountKeyRotation{Phase: phase}
	return c
}

// inPhase returns a valid cluster whose CA rotation is in phase, with the
// given pools pending.
func inPhase(phase v1alpha1.CARotationPhase, pending ...string) *v1alpha1.Cluster {
	c := validCluster()
	if phase == "" && len(pending) == 0 {
		return c
	}
	r := &v1alpha1.CARotation{Phase: phase}
	for _, p := range pending {
		r.PendingWorkersRollouts = append(r.PendingWorkersRollouts, v1alpha1.PendingWorkersRollout{Name: p})
	}
	c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: r}}
	return c
}

// holding returns c with the named pending pools held.
func holding(c *v1alpha1.Cluster, pools ...string) *v1alpha1.Cluster {
	for i, p := range c.CARotation().PendingWorkersRollouts {
		for _, name := range pools {
			if p.Name == name {
				c.CARotation().PendingWorkersRollouts[i].Held = true
			}
		}
	}
	return c
}

func withOperation(c *v1alpha1.Cluster, op string) *v1alpha1.Cluster {
	c = c.DeepCopy()
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[v1alpha1.OperationAnnotation] = op
	return c
}

// usedBy returns c with the old-CA usage gate listing n dependents.
func usedBy(c *v1alpha1.Cluster, n int) *v1alpha1.Cluster {
	u := &v1alpha1.OldCAUsage{Total: int32(n)}
	for i := range min(n, 4) {
		u.Dependents = append(u.Dependents, v1alpha1.OldCADependent{Kind: v1alpha1.OldCADependentNode, Name: fmt.Sprintf("w%d", i)})
	}
	c.CARotation().OldCAUsage = u
	return c
}

func TestValidateOperation(t *testing.T) {
	now := metav1.Now()
	deleting := inPhase(v1alpha1.RotationPrepared)
	deleting.DeletionTimestamp = &now
	tests := []struct {
		name string
		old  *v1alpha1.Cluster // nil: create
		op   string
		want string // substring of the error; empty means allowed
	}{
		{"start on create", nil, v1alpha1.OperationStartCARotation, ""},
		{"start, never rotated", inPhase(""), v1alpha1.OperationStartCARotation, ""},
		{"start after Completed", inPhase(v1alpha1.RotationCompleted), v1alpha1.OperationStartCARotation, ""},
		{"start while Preparing", inPhase(v1alpha1.RotationPreparing), v1alpha1.OperationStartCARotation,
			"cannot start a CA rotation: the rotation is in phase Preparing: wait until the phase is Prepared"},
		{"start while Prepared", inPhase(v1alpha1.RotationPrepared), v1alpha1.OperationStartCARotation,
			"cannot start a CA rotation: the rotation is in phase Prepared: complete it with carousel.dev/operation=complete-ca-rotation"},
		{"start while Finalizing", inPhase(v1alpha1.RotationFinalizing), v1alpha1.OperationStartCARotation,
			"in phase Finalizing: wait until the phase is Completed"},
		{"complete from Prepared before the gate was evaluated", inPhase(v1alpha1.RotationPrepared), v1alpha1.OperationCompleteCARotation,
			"the old-CA usage gate has not yet worked out who still depends on the old CAs (status.credentials.rotation.certificateAuthorities.oldCAUsage): " +
				"try again in a moment, or complete anyway with carousel.dev/operation=complete-ca-rotation=force"},
		{"complete from Prepared, nothing on the old CAs", usedBy(inPhase(v1alpha1.RotationPrepared), 0), v1alpha1.OperationCompleteCARotation, ""},
		{"complete while the old CAs are in use", usedBy(inPhase(v1alpha1.RotationPrepared), 5), v1alpha1.OperationCompleteCARotation,
			"5 clients still depend on the old CAs: Node w0, Node w1, Node w2 and 2 more; completing the rotation now would lock them out. " +
				"Move them to the new CAs (kubectl carousel rotation status lists them, status.credentials.rotation.certificateAuthorities.oldCAUsage says why), " +
				"or complete anyway with carousel.dev/operation=complete-ca-rotation=force"},
		{"force a completion while the old CAs are in use", usedBy(inPhase(v1alpha1.RotationPrepared), 5), "complete-ca-rotation=force", ""},
		{"force a completion outside Prepared", inPhase(v1alpha1.RotationPreparing), "complete-ca-rotation=force", "cannot complete the CA rotation in phase Preparing"},
		{"force an abort from Prepared", inPhase(v1alpha1.RotationPrepared), "abort-ca-rotation=force", ""},
		{"force the abort under way", inPhase(v1alpha1.RotationAborting), "abort-ca-rotation=force", ""},
		{"abort the abort under way", inPhase(v1alpha1.RotationAborting), v1alpha1.OperationAbortCARotation, "cannot abort the CA rotation in phase Aborting"},
		{"force an abort that is over", inPhase(v1alpha1.RotationAborted), "abort-ca-rotation=force", "cannot abort the CA rotation in phase Aborted"},
		{"complete, never rotated", inPhase(""), v1alpha1.OperationCompleteCARotation,
			"cannot complete the CA rotation in phase none (never rotated), only in phase Prepared: start one with carousel.dev/operation=start-ca-rotation"},
		{"complete on create", nil, v1alpha1.OperationCompleteCARotation, "in phase none (never rotated)"},
		{"complete while Preparing", inPhase(v1alpha1.RotationPreparing), v1alpha1.OperationCompleteCARotation,
			"cannot complete the CA rotation in phase Preparing, only in phase Prepared: wait until the phase is Prepared"},
		{"complete while Finalizing", inPhase(v1alpha1.RotationFinalizing), v1alpha1.OperationCompleteCARotation, "in phase Finalizing"},
		{"complete after Completed", inPhase(v1alpha1.RotationCompleted), v1alpha1.OperationCompleteCARotation,
			"in phase Completed, only in phase Prepared: start one with"},
		{"reconcile any time", inPhase(v1alpha1.RotationFinalizing), v1alpha1.OperationReconcile, ""},
		{"unknown operation", inPhase(""), "rotate-everything", `unknown operation "rotate-everything"`},
		{"rollout of a pending pool", inPhase(v1alpha1.RotationPreparing, "pool-b"), "rollout-workers=pool-b", ""},
		{"rollout of two pending pools", inPhase(v1alpha1.RotationPreparing, "pool-a", "pool-b"), "rollout-workers=pool-a,pool-b", ""},
		{"rollout of an unknown pool", inPhase(v1alpha1.RotationPreparing, "pool-b"), "rollout-workers=pool-z", `worker pool "pool-z" does not exist (phase Preparing): name pools from spec.workers`},
		{"rollout of a pool not pending", inPhase(v1alpha1.RotationPreparing, "pool-b"), "rollout-workers=pool-a",
			`worker pool "pool-a" has no pending rollout in phase Preparing`},
		{"rollout with no rotation", inPhase(""), "rollout-workers=pool-a", "in phase none (never rotated)"},
		{"rollout naming a pool twice", inPhase(v1alpha1.RotationPreparing, "pool-b"), "rollout-workers=pool-b,pool-b", `names worker pool "pool-b" twice`},
		{"rollout of nothing", inPhase(v1alpha1.RotationPreparing, "pool-b"), "rollout-workers=", "names an empty worker pool"},
		{"start without workers rollout, never rotated", inPhase(""), v1alpha1.OperationStartCARotationWithoutWorkersRollout, ""},
		{"start without workers rollout while Prepared", inPhase(v1alpha1.RotationPrepared), v1alpha1.OperationStartCARotationWithoutWorkersRollout,
			"cannot start a CA rotation: the rotation is in phase Prepared"},
		{"start while pools are held", holding(inPhase(v1alpha1.RotationWaitingForWorkersRollout, "pool-a"), "pool-a"), v1alpha1.OperationStartCARotation,
			"cannot start a CA rotation: the rotation is in phase WaitingForWorkersRollout: roll the held worker pools with " +
				"carousel.dev/operation=rotate-rollout-workers=<pool>[,<pool>]"},
		{"complete while pools are held", holding(inPhase(v1alpha1.RotationWaitingForWorkersRollout, "pool-a", "pool-b"), "pool-a", "pool-b"),
			v1alpha1.OperationCompleteCARotation, "cannot complete the CA rotation in phase WaitingForWorkersRollout, only in phase Prepared: " +
				"roll the held worker pools with carousel.dev/operation=rotate-rollout-workers=<pool>[,<pool>]"},
		{"complete while the control plane prepares without workers", holding(inPhase(v1alpha1.RotationPreparingWithoutWorkersRollout, "pool-a"), "pool-a"),
			v1alpha1.OperationCompleteCARotation, "cannot complete the CA rotation in phase PreparingWithoutWorkersRollout, only in phase Prepared: " +
				"wait until the phase is WaitingForWorkersRollout, then roll the held worker pools with carousel.dev/operation=rotate-rollout-workers=<pool>[,<pool>]"},
		{"roll held pools", holding(inPhase(v1alpha1.RotationWaitingForWorkersRollout, "pool-a", "pool-b"), "pool-a", "pool-b"), "rotate-rollout-workers=pool-b,pool-a", ""},
		{"roll a held pool early", holding(inPhase(v1alpha1.RotationPreparingWithoutWorkersRollout, "pool-a"), "pool-a"), "rotate-rollout-workers=pool-a", ""},
		{"roll a pool that is not held", holding(inPhase(v1alpha1.RotationPreparing, "pool-a", "pool-b"), "pool-b"), "rotate-rollout-workers=pool-a",
			`worker pool "pool-a" is not held in phase Preparing: name only pools listed with held: true`},
		{"roll the pool still held after another was rolled early", holding(inPhase(v1alpha1.RotationPreparing, "pool-a", "pool-b"), "pool-b"),
			"rotate-rollout-workers=pool-b", ""},
		{"roll held pools in Preparing when none is held", inPhase(v1alpha1.RotationPreparing, "pool-a"), "rotate-rollout-workers=pool-a",
			"cannot roll held worker pools in phase Preparing: pools are held only by a rotation started with " +
				"carousel.dev/operation=start-ca-rotation-without-workers-rollout, in phases PreparingWithoutWorkersRollout and WaitingForWorkersRollout, " +
				"and in Preparing while some are held; wait until the phase is Prepared"},
		{"complete while a pool is held after another was rolled early", holding(inPhase(v1alpha1.RotationPreparing, "pool-a", "pool-b"), "pool-b"),
			v1alpha1.OperationCompleteCARotation, "cannot complete the CA rotation in phase Preparing, only in phase Prepared: " +
				"roll the held worker pools with carousel.dev/operation=rotate-rollout-workers=<pool>[,<pool>]"},
		{"roll a released pool", holding(inPhase(v1alpha1.RotationWaitingForWorkersRollout, "pool-a", "pool-b"), "pool-b"), "rotate-rollout-workers=pool-a",
			`worker pool "pool-a" is not held in phase WaitingForWorkersRollout: name only pools listed with held: true`},
		{"roll an unknown pool", holding(inPhase(v1alpha1.RotationWaitingForWorkersRollout, "pool-a"), "pool-a"), "rotate-rollout-workers=pool-z",
			`worker pool "pool-z" does not exist (phase WaitingForWorkersRollout)`},
		{"roll held pools of a Cluster never rotated", inPhase(""), "rotate-rollout-workers=pool-a", "cannot roll held worker pools in phase none (never rotated)"},
		{"roll held pools in Prepared", inPhase(v1alpha1.RotationPrepared), "rotate-rollout-workers=pool-a",
			"cannot roll held worker pools in phase Prepared: pools are held only by a rotation started with"},
		{"roll no pool", holding(inPhase(v1alpha1.RotationWaitingForWorkersRollout, "pool-a"), "pool-a"), "rotate-rollout-workers=", "names an empty worker pool"},
		{"report a held pool rolled by hand", holding(inPhase(v1alpha1.RotationWaitingForWorkersRollout, "pool-a"), "pool-a"), "rollout-workers=pool-a", ""},
		{"reissue a CA, never rotated", inPhase(""), "reissue-ca=etcd", ""},
		{"reissue two CAs after Completed", inPhase(v1alpha1.RotationCompleted), "reissue-ca=etcd,client", ""},
		{"reissue during a rotation", inPhase(v1alpha1.RotationPrepared), "reissue-ca=etcd",
			"cannot reissue a CA during a CA rotation (phase Prepared): a lost CA Secret must be restored, for example with `kubectl carousel certs restore`"},
		{"reissue an unknown role", inPhase(""), "reissue-ca=etcd,dns", `names "dns", which is not a CA role`},
		{"reissue nothing", inPhase(""), "reissue-ca=", "names an empty CA role"},
		{"reissue a role twice", inPhase(""), "reissue-ca=vpn,vpn", `names CA role "vpn" twice`},
		{"any operation while deleting", deleting, v1alpha1.OperationCompleteCARotation, "the cluster is being deleted"},
		{"unchanged annotation is not checked again", withOperation(inPhase(v1alpha1.RotationPreparing), v1alpha1.OperationStartCARotation), v1alpha1.OperationStartCARotation, ""},
		{"changed annotation is checked", withOperation(inPhase(""), v1alpha1.OperationStartCARotation), v1alpha1.OperationCompleteCARotation, "in phase none"},
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
		old    *v1alpha1.Cluster
		mutate func(*v1alpha1.ClusterSpec)
		want   string
	}{
		{"key algorithm during Preparing", inPhase(v1alpha1.RotationPreparing), func(s *v1alpha1.ClusterSpec) { s.Certificates.KeyAlgorithm = v1alpha1.KeyAlgorithmRSA3072 },
			"spec.certificates: Forbidden: cannot change while the CA rotation is in phase Preparing: wait until the phase is Prepared"},
		{"CA validity during Prepared", inPhase(v1alpha1.RotationPrepared), func(s *v1alpha1.ClusterSpec) { s.Certificates.CAValidity = dur(1000 * time.Hour) },
			"in phase Prepared: complete it with"},
		{"explicit default is no change", inPhase(v1alpha1.RotationPrepared), func(s *v1alpha1.ClusterSpec) { s.Certificates.KeyAlgorithm = "" }, ""},
		{"key algorithm when Completed", inPhase(v1alpha1.RotationCompleted), func(s *v1alpha1.ClusterSpec) { s.Certificates.KeyAlgorithm = v1alpha1.KeyAlgorithmRSA3072 }, ""},
		{"remove a pending pool", inPhase(v1alpha1.RotationPreparing, "pool-b"), func(s *v1alpha1.ClusterSpec) { s.Workers = s.Workers[:1] },
			`cannot remove worker pool "pool-b" while its rollout is pending in phase Preparing`},
		{"another MachineDeployment for a pool being rolled", inPhase(v1alpha1.RotationPreparing, "pool-c"), func(s *v1alpha1.ClusterSpec) { s.Workers[2].MachineDeployment = "prod-pool-c2" },
			`spec.workers: Forbidden: cannot change the rollout strategy or MachineDeployment of worker pool "pool-c" while it is being rolled in phase Preparing: ` +
				`wait until it leaves pendingWorkersRollouts, or roll it yourself and report it with carousel.dev/operation=rollout-workers=pool-c`},
		{"another strategy for a pool being rolled", inPhase(v1alpha1.RotationFinalizing, "pool-a"), func(s *v1alpha1.ClusterSpec) { s.Workers[0].RolloutStrategy = v1alpha1.RolloutManual },
			`cannot change the rollout strategy or MachineDeployment of worker pool "pool-a" while it is being rolled in phase Finalizing`},
		{"another strategy for a held pool", holding(inPhase(v1alpha1.RotationWaitingForWorkersRollout, "pool-a"), "pool-a"),
			func(s *v1alpha1.ClusterSpec) { s.Workers[0].RolloutStrategy = v1alpha1.RolloutManual }, ""},
		{"another MachineDeployment for a rolled pool", inPhase(v1alpha1.RotationPreparing, "pool-a"), func(s *v1alpha1.ClusterSpec) { s.Workers[2].MachineDeployment = "prod-pool-c2" }, ""},
		{"remove a rolled pool", inPhase(v1alpha1.RotationPreparing, "pool-a"), func(s *v1alpha1.ClusterSpec) { s.Workers = s.Workers[:1] }, ""},
		{"add a pool", inPhase(v1alpha1.RotationFinalizing, "pool-a"), func(s *v1alpha1.ClusterSpec) {
			s.Workers = append(s.Workers, v1alpha1.WorkerPool{Name: "pool-d", RolloutStrategy: v1alpha1.RolloutInPlace})
		}, ""},
		{"endpoint change", inPhase(v1alpha1.RotationPreparing), func(s *v1alpha1.ClusterSpec) { s.ControlPlane.Endpoint = "https://10.0.0.2:6443" }, ""},
		{"endpoint removed during Finalizing", inPhase(v1alpha1.RotationFinalizing), func(s *v1alpha1.ClusterSpec) { s.ControlPlane.Endpoint = "" },
			"spec.controlPlane.endpoint: Forbidden: cannot be removed while the CA rotation is in phase Finalizing: the rotation checks the API server at this endpoint"},
		{"endpoint removed when Completed", inPhase(v1alpha1.RotationCompleted), func(s *v1alpha1.ClusterSpec) { s.ControlPlane.Endpoint = "" }, ""},
		{"endpoint removed while the service-account key rotation prepares", keyInPhase(inPhase(v1alpha1.RotationCompleted), v1alpha1.ServiceAccountKeyPreparing),
			func(s *v1alpha1.ClusterSpec) { s.ControlPlane.Endpoint = "" },
			"spec.controlPlane.endpoint: Forbidden: cannot be removed while the service-account key rotation is in phase Preparing: the rotation checks the token Secrets"},
		{"endpoint removed once the service-account key rotation is Prepared", keyInPhase(inPhase(v1alpha1.RotationCompleted), v1alpha1.ServiceAccountKeyPrepared),
			func(s *v1alpha1.ClusterSpec) { s.ControlPlane.Endpoint = "" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			newC := tt.old.DeepCopy()
			tt.mutate(&newC.Spec)
			assertValidation(t, errorsText(newC, tt.old), tt.want)
		})
	}
}
