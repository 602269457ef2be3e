package plugin

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	outputv1alpha1 "github.com/carousel-dev/carousel/apis/output/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// run runs kubectl carousel with args and returns its error.
func run(args ...string) error {
	var out bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out}, clock.RealClock{})
	cmd.SetArgs(args)
	return cmd.Execute()
}

// A --wait with a timeout that is not positive is refused before anything
// is written (the server, on a closed loopback port, is never reached).
func TestAWaitWithoutTimeIsRefusedBeforeAnythingIsWritten(t *testing.T) {
	for _, args := range [][]string{
		{"rotation", "start", "prod", "--wait", "--timeout", "0"},
		{"rotation", "complete", "prod", "--wait", "--timeout", "-1m"},
		{"rotation", "abort", "prod", "--wait", "--timeout", "0s"},
		{"campaign", "complete", "wave", "--wait", "--timeout", "0"},
	} {
		err := run(append(args, "-n", "team-a", "--server", "https://127.0.0.1:1")...)
		if err == nil || !strings.Contains(err.Error(), "--wait needs a positive timeout") {
			t.Errorf("%v: %v", args, err)
		}
	}
	if err := run("rotation", "start", "prod", "--timeout", "0", "-n", "team-a", "--server", "https://127.0.0.1:1"); err == nil ||
		strings.Contains(err.Error(), "positive timeout") {
		t.Errorf("without --wait, --timeout 0 is refused or the server not asked: %v", err)
	}
}

// A --name that would not tell its user apart, or that is not shown as
// written, or too long for a common name, is refused before anything is
// read or written.
func TestAKubeconfigNameIsChecked(t *testing.T) {
	for name, want := range map[string]string{
		"":                      "--name is empty",
		"alice smith":           "only printable characters without spaces",
		"alice\x1b[2J":          "only printable characters without spaces",
		strings.Repeat("a", 50): "at most 49 bytes",
	} {
		err := run("kubeconfig", "prod", "--name", name, "-n", "team-a", "--server", "https://127.0.0.1:1")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--name %q: %v, want %q", name, err, want)
		}
	}
	if err := checkKubeconfigName(strings.Repeat("a", 49)); err != nil {
		t.Errorf("a name of 49 bytes: %v", err)
	}
}

func TestACommandWithoutItsClusterSaysHowToCallIt(t *testing.T) {
	for _, args := range [][]string{
		{"rotation", "status"},
		{"rotation", "start", "a", "b"},
		{"certs", "check-expiration"},
		{"kubeconfig"},
	} {
		err := run(args...)
		if err == nil || !strings.Contains(err.Error(), "takes the name of one Cluster") || !strings.Contains(err.Error(), " CLUSTER ") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// kubeconfig --output-file refuses a file that exists, or that cannot be
// created, before it issues or records anything (the API server here is
// none), and removes the file it created when it issues nothing.
func TestAKubeconfigIsNotWrittenOverAFile(t *testing.T) {
	existing := filepath.Join(t.TempDir(), "prod.kubeconfig")
	if err := os.WriteFile(existing, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run("kubeconfig", "prod", "--output-file", existing, "--kubeconfig", filepath.Join(t.TempDir(), "none"))
	if err == nil || !strings.Contains(err.Error(), "--output-file "+existing+": the file exists") {
		t.Errorf("err = %v, want the file refused", err)
	}
	if data, _ := os.ReadFile(existing); string(data) != "mine" {
		t.Errorf("the file now holds %q", data)
	}
	err = run("kubeconfig", "prod", "--output-file", filepath.Join(t.TempDir(), "missing", "prod.kubeconfig"), "--kubeconfig", filepath.Join(t.TempDir(), "none"))
	if err == nil || !strings.Contains(err.Error(), "no directory to write it into") {
		t.Errorf("a file in a directory that does not exist: err = %v", err)
	}
	// procfs lets no one create a file, root included.
	err = run("kubeconfig", "prod", "--output-file", "/proc/self/prod.kubeconfig", "--kubeconfig", filepath.Join(t.TempDir(), "none"))
	if err == nil || !strings.Contains(err.Error(), "--output-file /proc/self/prod.kubeconfig: cannot be created") {
		t.Errorf("a file that cannot be created: err = %v, want it refused before the API server is asked", err)
	}
	created := filepath.Join(t.TempDir(), "prod.kubeconfig")
	if err = run("kubeconfig", "prod", "--output-file", created, "--kubeconfig", filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("a kubeconfig was issued without an API server")
	}
	if _, serr := os.Lstat(created); !errors.Is(serr, fs.ErrNotExist) {
		t.Errorf("after %v, the file is left behind: %v", err, serr)
	}
}

// A subcommand a group does not have fails, naming the one meant; the group
// alone prints its help.
func TestAMistypedSubcommandFails(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"rotation", "cmplete", "prod"}, `unknown command "cmplete" for "kubectl carousel rotation"` + "\n\nDid you mean this?\n\tcomplete"},
		{[]string{"certs", "uplaod", "prod"}, `unknown command "uplaod" for "kubectl carousel certs"`},
		{[]string{"campaign", "pasue", "wave"}, `unknown command "pasue" for "kubectl carousel campaign"` + "\n\nDid you mean this?\n\tpause"},
	} {
		if err := run(tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err = %v, want %q", tt.args, err, tt.want)
		}
	}
	for _, group := range []string{"rotation", "certs", "campaign"} {
		var out bytes.Buffer
		cmd := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out}, clock.RealClock{})
		cmd.SetArgs([]string{group})
		if err := cmd.Execute(); err != nil || !strings.Contains(out.String(), "Available Commands:") {
			t.Errorf("%s alone: %v, output %q; want its help", group, err, out.String())
		}
	}
}

func TestWithoutAKubeconfigItSaysWhatToPointAtTheManagementCluster(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", filepath.Join(home, "none"))
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if err := run("rotation", "status", "prod"); !errors.Is(err, errNoKubeconfig) {
		t.Fatalf("err = %v, want %v", err, errNoKubeconfig)
	}
	// An explicit server is taken at its word (and refused here: nothing listens on port 1).
	if err := run("rotation", "status", "prod", "--server", "https://127.0.0.1:1"); errors.Is(err, errNoKubeconfig) {
		t.Fatalf("--server: err = %v", err)
	}
}

func TestHelpNamesTheCommandUsersTypeAndEveryCommandExplainsItself(t *testing.T) {
	var out bytes.Buffer
	root := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out}, clock.RealClock{})
	root.SetArgs([]string{"rotation", "status", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "kubectl carousel rotation status CLUSTER [flags]") {
		t.Errorf("help shows\n%s", out.String())
	}
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		if cmd.Long == "" {
			t.Errorf("%s has no Long description", cmd.CommandPath())
		}
		// Runnable commands show how to call them; the groups list their commands.
		if cmd.Runnable() && !cmd.HasSubCommands() && cmd.Example == "" && cmd.Name() != "version" {
			t.Errorf("%s has no Examples", cmd.CommandPath())
		}
		// pflag takes a `quoted` word of a usage for the value's name: "--upload-id certs upload" in the help.
		cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: backquotes in %q", cmd.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range cmd.Commands() {
			if !sub.Hidden && sub.Name() != "help" {
				walk(sub)
			}
		}
	}
	walk(root)
}

func TestAnOutputFormatItCannotPrintIsRefusedBeforeAnythingIsRead(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	for _, args := range [][]string{
		{"rotation", "status", "prod", "-o", "wide"},
		{"rotation", "plan", "prod", "-o", "name"},
		{"certs", "check-expiration", "prod", "--output", "table"},
	} {
		err := run(args...)
		if err == nil || !strings.Contains(err.Error(), "choose one of json, yaml") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

func TestPlanAndExpirationPrintTheirOutputKinds(t *testing.T) {
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"},
		Spec: v1alpha1.ClusterSpec{Workers: []v1alpha1.WorkerPool{{Name: "blue", RolloutStrategy: v1alpha1.RolloutManual},
			{Name: "green", RolloutStrategy: v1alpha1.RolloutReplace, MachineDeployment: "green-md"}}}}
	plan := rotationPlan(cl, nil, map[string]outputv1alpha1.WorkerPoolPlan{
		"blue":  {Name: "blue", RolloutStrategy: "Manual", Nodes: []string{"n1", "n2"}},
		"green": {Name: "green", RolloutStrategy: "Replace", MachineDeployment: "green-md", Nodes: []string{"m1"}},
	})
	plan.NodesOutsidePools, plan.NodesUnknown = []string{"n3", "n4"}, "the Cluster has no endpoint"
	var human bytes.Buffer
	writePlan(&human, plan)
	for _, want := range []string{
		"\nThe managed cluster's nodes are unknown (the Cluster has no endpoint): those in no worker pool",
		"\n2 node(s) in no worker pool, which no phase rolls and which hold complete-ca-rotation while online: n3, n4\n" +
			"  label each carousel.dev/pool=<pool> before the rotation starts\n",
		"Cluster team-a/prod, now in phase none (never rotated).",
		"roll (to trust both): none labelled " + v1alpha1.LabelCluster + "=prod",
		"    blue (Manual): 2 node(s): n1, n2",
		"    green (Replace, Cluster API replaces the Machines of MachineDeployment green-md): 1 node(s): m1",
		"\nInstead of complete-ca-rotation: abort-ca-rotation -> Aborting -> Aborted\n",
	} {
		if !strings.Contains(human.String(), want) {
			t.Errorf("the plan lacks %q:\n%s", want, human.String())
		}
	}

	o := &output{format: "json", flags: genericclioptions.NewJSONYamlPrintFlags()}
	p, err := o.toPrinter()
	if err != nil {
		t.Fatal(err)
	}
	var printed bytes.Buffer
	if err := p.PrintObj(plan, &printed); err != nil {
		t.Fatal(err)
	}
	var decoded outputv1alpha1.RotationPlan
	if err := json.Unmarshal(printed.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	if decoded.APIVersion != "output.carousel.dev/v1alpha1" || decoded.Kind != "RotationPlan" || len(decoded.Phases) != 3 ||
		decoded.Phases[2].InsteadOf != v1alpha1.OperationCompleteCARotation {
		t.Fatalf("printed %s", printed.String())
	}
	var clientCertificates []string
	for _, step := range decoded.Phases[0].Steps {
		if step.List == "clientCertificates" {
			clientCertificates = step.Items
		}
	}
	var want []string
	for _, cert := range credentials.Certificates(cl) {
		if cert.RenewIn == credentials.RenewInPreparing {
			want = append(want, cert.Name)
		}
	}
	if len(want) == 0 || !slices.Equal(clientCertificates, want) {
		t.Errorf("the first phase's client certificates are %v, want %v", clientCertificates, want)
	}
}

func TestFollowLineSaysThePhaseOnce(t *testing.T) {
	cl := &v1alpha1.Cluster{Status: v1alpha1.ClusterStatus{
		Credentials: &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{
			CertificateAuthorities: &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing}}},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionCARotation, Status: metav1.ConditionTrue,
			Message: "Preparing: waiting for the control-plane workloads to roll out"}},
	}}
	ca := followTarget{ca: []v1alpha1.CARotationPhase{v1alpha1.RotationPrepared}}
	if got, want := followLine(cl, ca), "phase Preparing: waiting for the control-plane workloads to roll out"; got != want {
		t.Errorf("followLine = %q, want %q", got, want)
	}
	// An operation moved the phase; the condition is the previous phase's.
	cl.Status.Conditions[0].Message = "WaitingForWorkersRollout: everything but the held worker pools is prepared; 1 pool(s) held: a"
	if got, want := followLine(cl, ca), "phase Preparing"; got != want {
		t.Errorf("followLine with the previous phase's condition = %q, want %q", got, want)
	}
	// Both rotations followed (--scope all).
	cl.Status.Credentials.Rotation.ServiceAccountKey = &v1alpha1.ServiceAccountKeyRotation{Phase: v1alpha1.ServiceAccountKeyPreparing}
	cl.Status.Conditions = append(cl.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionServiceAccountKeyRotation,
		Status: metav1.ConditionTrue, Message: "Preparing: generating and storing the new service-account key"})
	both := followTarget{ca: ca.ca, serviceAccountKey: v1alpha1.ServiceAccountKeyPrepared}
	if got, want := followLine(cl, both), "phase Preparing; service-account key phase Preparing: generating and storing the new service-account key"; got != want {
		t.Errorf("followLine of both rotations = %q, want %q", got, want)
	}
	if rotationReached(cl, both) {
		t.Error("rotationReached with the key Preparing, want false")
	}
	cl.Status.Credentials.Rotation.CertificateAuthorities.Phase = v1alpha1.RotationPrepared
	cl.Status.Credentials.Rotation.ServiceAccountKey.Phase = v1alpha1.ServiceAccountKeyPrepared
	if !rotationReached(cl, both) {
		t.Error("rotationReached with both Prepared, want true")
	}
	// A completion queued for the maintenance window (before the start, say)
	// keeps only a --wait on a queued operation from ending.
	cl.Annotations = map[string]string{v1alpha1.MaintenanceOperationAnnotation: string(v1alpha1.VerbRotateCredentialsComplete)}
	if !rotationReached(cl, both) {
		t.Error("rotationReached with both Prepared and a completion queued, want true")
	}
	if queued := (followTarget{ca: both.ca, serviceAccountKey: both.serviceAccountKey, queued: string(v1alpha1.VerbRotateCredentialsComplete)}); rotationReached(cl, queued) {
		t.Error("rotationReached for an operation queued, with it still queued, want false")
	}
	// A start queued, which the window ran, and a completion queued since
	// for the next window: the start's --wait ends at Prepared.
	if queued := (followTarget{ca: both.ca, serviceAccountKey: both.serviceAccountKey, queued: string(v1alpha1.VerbRotateCredentialsStart)}); !rotationReached(cl, queued) {
		t.Error("rotationReached for a start queued and run, with a completion queued since, want true")
	}
}

// TestAbortedMeanwhile: a --wait for a phase the rotation no longer reaches,
// because someone aborted it, ends (it waited until its timeout); not while
// the operation followed is still requested or queued (a start on an
// Aborted rotation, not taken up yet), nor for the abort's own --wait.
func TestAbortedMeanwhile(t *testing.T) {
	prepared := followTarget{ca: []v1alpha1.CARotationPhase{v1alpha1.RotationPrepared}}
	aborted := followTarget{ca: []v1alpha1.CARotationPhase{v1alpha1.RotationAborted}}
	in := func(phase v1alpha1.CARotationPhase, annotations map[string]string) *v1alpha1.Cluster {
		return &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}, Status: v1alpha1.ClusterStatus{
			Credentials: &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{Phase: phase}}}}}
	}
	for _, tc := range []struct {
		name   string
		cl     *v1alpha1.Cluster
		target followTarget
		want   bool
	}{
		{"preparing", in(v1alpha1.RotationPreparing, nil), prepared, false},
		{"aborting, for Prepared", in(v1alpha1.RotationAborting, nil), prepared, true},
		{"aborted, for Prepared", in(v1alpha1.RotationAborted, nil), prepared, true},
		{"aborted, a start not taken up yet", in(v1alpha1.RotationAborted, map[string]string{v1alpha1.OperationAnnotation: v1alpha1.OperationStartCARotation}), prepared, false},
		{"aborted, a start queued", in(v1alpha1.RotationAborted, map[string]string{v1alpha1.MaintenanceOperationAnnotation: v1alpha1.OperationStartCARotation}), prepared, false},
		{"aborted, a completion queued", in(v1alpha1.RotationAborted, map[string]string{v1alpha1.MaintenanceOperationAnnotation: v1alpha1.OperationCompleteCARotation}), prepared, true},
		{"aborting, for the abort", in(v1alpha1.RotationAborting, nil), aborted, false},
		{"aborted, for the service-account key alone", in(v1alpha1.RotationAborted, nil), followTarget{serviceAccountKey: v1alpha1.ServiceAccountKeyPrepared}, false},
	} {
		if got := abortedMeanwhile(tc.cl, tc.target); got != tc.want {
			t.Errorf("%s: abortedMeanwhile = %t, want %t", tc.name, got, tc.want)
		}
	}
}

func TestOperationOf(t *testing.T) {
	prepared := []v1alpha1.CARotationPhase{v1alpha1.RotationPrepared}
	for _, tc := range []struct {
		scope    scope
		complete bool
		op       string
		target   string
	}{
		{scopeCA, false, "start-ca-rotation", "Prepared"},
		{scopeServiceAccountKey, false, "rotate-serviceaccount-key-start", "service-account key Prepared"},
		{scopeAll, false, "rotate-credentials-start", "Prepared and service-account key Prepared"},
		{scopeServiceAccountKey, true, "rotate-serviceaccount-key-complete", "service-account key Completed"},
		{scopeAll, true, "rotate-credentials-complete", "Prepared and service-account key Completed"},
	} {
		op, target, err := operationOf(tc.scope, tc.complete, prepared)
		if err != nil || op != tc.op || target.String() != tc.target {
			t.Errorf("operationOf(%s, complete %t) = %q, %q, %v; want %q, %q", tc.scope, tc.complete, op, target, err, tc.op, tc.target)
		}
	}
	if _, _, err := operationOf("keys", false, prepared); err == nil || !strings.Contains(err.Error(), `--scope "keys" is not one of ca, service-account-key, all`) {
		t.Errorf("operationOf(keys) error = %v", err)
	}
}

// --wait follows a start, by default, an hour past the waits the Cluster's
// spec puts into it (a service-account key rotation is never Prepared
// within an hour of its start by default); a --timeout given is taken as it is.
func TestFollowTimeout(t *testing.T) {
	cl := &v1alpha1.Cluster{}
	cl.Spec.CARotation.WorkloadTrustReload = &metav1.Duration{Duration: 20 * time.Minute}
	for _, tc := range []struct {
		operation  string
		timeoutSet bool
		want       time.Duration
	}{
		{"start-ca-rotation", false, time.Hour + 20*time.Minute},
		{"start-ca-rotation-without-workers-rollout", false, time.Hour + 20*time.Minute},
		{"rotate-serviceaccount-key-start", false, 2 * time.Hour},
		{"rotate-credentials-start", false, 2 * time.Hour},
		{"complete-ca-rotation", false, time.Hour},
		{"rotate-serviceaccount-key-complete", false, time.Hour},
		{"rotate-rollout-workers=pool-a", false, time.Hour + 20*time.Minute}, // the last held pool's ends after workloadTrustReload
		{"rotate-serviceaccount-key-start", true, time.Hour},
	} {
		f := &operationFlags{timeout: time.Hour, timeoutSet: tc.timeoutSet}
		if got := followTimeout(f, tc.operation, cl); got != tc.want {
			t.Errorf("followTimeout(%s, --timeout given %t) = %s, want %s", tc.operation, tc.timeoutSet, got, tc.want)
		}
	}
}

// Only the operations maintenance.Queueable lets wait for the window offer
// --in-maintenance-window.
func TestOnlyOperationsThatCanWaitForTheMaintenanceWindowOfferIt(t *testing.T) {
	root := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}, clock.RealClock{})
	for path, want := range map[string]bool{"rotation start": true, "rotation complete": true, "rotation rollout-workers": false} {
		cmd, _, err := root.Find(strings.Fields(path))
		if err != nil {
			t.Fatal(err)
		}
		if got := cmd.Flags().Lookup("in-maintenance-window") != nil; got != want {
			t.Errorf("%s offers --in-maintenance-window: %v, want %v", path, got, want)
		}
	}
	err := run("rotation", "start", "prod", "--without-workers-rollout", "--in-maintenance-window", "--kubeconfig", filepath.Join(t.TempDir(), "none"))
	if err == nil || !strings.Contains(err.Error(), "--in-maintenance-window: only") {
		t.Errorf("start --without-workers-rollout --in-maintenance-window: err = %v", err)
	}
	err = run("rotation", "complete", "prod", "--force", "--in-maintenance-window", "--kubeconfig", filepath.Join(t.TempDir(), "none"))
	if err == nil || !strings.Contains(err.Error(), "--in-maintenance-window: a forced operation does not wait") {
		t.Errorf("complete --force --in-maintenance-window: err = %v", err)
	}
}

func TestAnOperationMayBeRefusedWhenItIsGoneAndLeftNoTrace(t *testing.T) {
	at := metav1.Unix(1_800_000_000, 0)
	prepared := func(change func(*v1alpha1.Cluster)) *v1alpha1.Cluster {
		cl := &v1alpha1.Cluster{Status: v1alpha1.ClusterStatus{Credentials: &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{
			CertificateAuthorities: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationTime: &at,
				OldCAUsage: &v1alpha1.OldCAUsage{}}}}}}
		change(cl)
		return cl
	}
	complete := &request{operation: v1alpha1.OperationCompleteCARotation, record: operationRecord(prepared(func(*v1alpha1.Cluster) {}))}
	toCompleted := followTarget{ca: []v1alpha1.CARotationPhase{v1alpha1.RotationCompleted}}
	for _, tt := range []struct {
		name   string
		req    *request
		target followTarget
		now    *v1alpha1.Cluster
		want   bool
	}{
		{"not taken yet", complete, toCompleted, prepared(func(cl *v1alpha1.Cluster) {
			cl.Annotations = map[string]string{v1alpha1.OperationAnnotation: v1alpha1.OperationCompleteCARotation}
		}), false},
		{"gone, the rotation as it was", complete, toCompleted, prepared(func(*v1alpha1.Cluster) {}), true},
		{"gone, only the old-CA usage list changed", complete, toCompleted, prepared(func(cl *v1alpha1.Cluster) {
			cl.CARotation().OldCAUsage = &v1alpha1.OldCAUsage{Dependents: []v1alpha1.OldCADependent{{Name: "n1", Message: "an old-CA client certificate"}}}
		}), true},
		{"gone, the rotation Finalizing", complete, toCompleted, prepared(func(cl *v1alpha1.Cluster) {
			cl.CARotation().Phase, cl.CARotation().LastCompletionTriggeredTime = v1alpha1.RotationFinalizing, &at
		}), false},
		{"a forced abort that ended the wait, the phase unchanged", &request{operation: "abort-ca-rotation=force", record: operationRecord(prepared(func(cl *v1alpha1.Cluster) {
			cl.CARotation().Phase = v1alpha1.RotationAborting
		}))}, followTarget{ca: []v1alpha1.CARotationPhase{v1alpha1.RotationAborted}}, prepared(func(cl *v1alpha1.Cluster) {
			cl.CARotation().Phase, cl.CARotation().AbortForcedTime = v1alpha1.RotationAborting, &at
		}), false},
		{"gone, the target reached", complete, followTarget{ca: []v1alpha1.CARotationPhase{v1alpha1.RotationPrepared}}, prepared(func(*v1alpha1.Cluster) {}), false},
		{"a first rotation, refused", &request{operation: v1alpha1.OperationStartCARotation, record: operationRecord(&v1alpha1.Cluster{})},
			followTarget{ca: []v1alpha1.CARotationPhase{v1alpha1.RotationPrepared}}, &v1alpha1.Cluster{}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.req.mayBeRefusedBy(tt.now, tt.target); got != tt.want {
				t.Errorf("mayBeRefusedBy = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTheRefusalIsTheNewestEventAboutTheOperationSinceTheRequest(t *testing.T) {
	event := func(message string, at int64, series int64) corev1.Event {
		ev := corev1.Event{ObjectMeta: metav1.ObjectMeta{UID: k8stypes.UID(fmt.Sprint("uid-", at)), ResourceVersion: "1"}, Message: message, LastTimestamp: metav1.Unix(at, 0)}
		if series > 0 {
			ev.Series = &corev1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(time.Unix(series, 0))}
		}
		return ev
	}
	events := []corev1.Event{
		event(`Operation "complete-ca-rotation" refused in phase "Prepared": an old one`, 100, 0),
		event(`Operation "complete-ca-rotation=force" refused in phase "Finalizing": another operation`, 300, 0),
		event(`Operation "complete-ca-rotation" refused in phase "Prepared": seen again since`, 50, 200),
	}
	if got := newRefusal(events, "complete-ca-rotation", nil); !strings.HasSuffix(got, "seen again since") {
		t.Errorf("newRefusal = %q", got)
	}
	if got := newRefusal(events, "start-ca-rotation", nil); got != "" {
		t.Errorf("newRefusal of an operation without an event = %q", got)
	}
	// Before the request: the series had its resourceVersion, the other
	// refusal was there as it is.
	before := map[k8stypes.UID]string{"uid-50": "1", "uid-100": "0"}
	if got := newRefusal(events, "complete-ca-rotation", before); !strings.HasSuffix(got, "an old one") {
		t.Errorf("newRefusal of a refusal since the request = %q, want the one that changed", got)
	}
	before["uid-100"] = "1"
	if got := newRefusal(events, "complete-ca-rotation", before); got != "" {
		t.Errorf("newRefusal with no refusal since the request = %q", got)
	}
}

// The hint at the Clusters a campaign's status does not list names the
// campaign's namespace: the current context's may be another.
func TestCampaignStatusPointsAtTheClustersItDoesNotList(t *testing.T) {
	rc := &v1alpha1.RotationCampaign{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "wave"},
		Spec: v1alpha1.RotationCampaignSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "blue"}}},
		Status: v1alpha1.RotationCampaignStatus{Clusters: v1alpha1.CampaignClusterCounts{Failed: 3},
			Blocking: []v1alpha1.CampaignCluster{{Name: "a", State: v1alpha1.CampaignClusterFailed, Message: "refused"}}}}
	var out bytes.Buffer
	writeCampaignStatus(&out, rc)
	if want := "(2 more; kubectl get clusters.carousel.dev -n team-a -l 'fleet=blue')\n"; !strings.HasSuffix(out.String(), want) {
		t.Errorf("status ends\n%s\nwant it to end %q", out.String(), want)
	}
}

// The default --name tells the same login on two machines apart: one
// person's new kubeconfig must not move another's user to the CA of now.
func TestTheDefaultKubeconfigNameIsTheLoginOnItsHost(t *testing.T) {
	for _, tt := range []struct{ login, host, want string }{
		{"root", "bastion-a", "root@bastion-a"},
		{"root", "bastion-b.corp.example", "root@bastion-b"},
		{"alice", "", "alice"},
		{"", "bastion-a", "kubectl-carousel@bastion-a"},
	} {
		if got := kubeconfigName(tt.login, tt.host); got != tt.want {
			t.Errorf("kubeconfigName(%q, %q) = %q, want %q", tt.login, tt.host, got, tt.want)
		}
	}
}

// --wait that may not list Clusters says so at once, not at its timeout.
func TestFollowSaysAtOnceThatItMayNotListClusters(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden,
			Message: `clusters.carousel.dev is forbidden: User "alice" cannot list resource "clusters" in API group "carousel.dev" in the namespace "team-a"`})
	}))
	defer api.Close()
	flags := genericclioptions.NewConfigFlags(false)
	flags.APIServer = &api.URL
	e := &env{flags: flags, streams: genericiooptions.IOStreams{Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := e.follow(ctx, "team-a", "prod", followTarget{ca: []v1alpha1.CARotationPhase{v1alpha1.RotationPrepared}}, time.Hour, nil)
	if err == nil || !strings.Contains(err.Error(), "cannot list resource") || ctx.Err() != nil {
		t.Fatalf("follow = %v (context: %v), want the refused list at once", err, ctx.Err())
	}
}

// --wait judges the Cluster as it is since the operation was written: the
// first list of the watch asks for the most recent copy, not for any the
// API server's watch cache holds (resourceVersion 0), which may be from
// before the write and would end a wait for rollout-workers at once.
func TestFollowJudgesNoCopyFromBeforeTheWrite(t *testing.T) {
	cluster := func(rv string, annotations map[string]string) v1alpha1.Cluster {
		return v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod", ResourceVersion: rv, Annotations: annotations},
			Status: v1alpha1.ClusterStatus{Credentials: &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{
				CertificateAuthorities: &v1alpha1.CARotation{Phase: v1alpha1.RotationWaitingForWorkersRollout}}}}}
	}
	before := cluster("1", nil)
	written := cluster("2", map[string]string{v1alpha1.OperationAnnotation: v1alpha1.OperationRotateRolloutWorkersPrefix + "a"})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case q.Get("watch") == "true" && q.Has("sendInitialEvents"): // no streaming list here: the reflector lists
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Reason: metav1.StatusReasonBadRequest, Code: http.StatusBadRequest, Message: "sendInitialEvents is not served"})
		case q.Get("watch") == "true":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			item := written
			if q.Get("resourceVersion") == "0" {
				item = before // the watch cache behind the write
			}
			_ = json.NewEncoder(w).Encode(v1alpha1.ClusterList{TypeMeta: metav1.TypeMeta{Kind: "ClusterList", APIVersion: v1alpha1.SchemeGroupVersion.String()},
				ListMeta: metav1.ListMeta{ResourceVersion: item.ResourceVersion}, Items: []v1alpha1.Cluster{item}})
		}
	}))
	defer api.Close()
	defer api.CloseClientConnections()
	flags := genericclioptions.NewConfigFlags(false)
	flags.APIServer = &api.URL
	e := &env{flags: flags, streams: genericiooptions.IOStreams{Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}}
	target := followTarget{ca: []v1alpha1.CARotationPhase{v1alpha1.RotationWaitingForWorkersRollout, v1alpha1.RotationPrepared}}
	err := e.follow(context.Background(), "team-a", "prod", target, 2*time.Second, nil)
	if err == nil || !strings.Contains(err.Error(), "after 2s") {
		t.Fatalf("follow = %v; want it to wait (until its timeout) while the operation written is requested", err)
	}
}

// An admin kubeconfig is handed out only for an endpoint the operator would
// connect to and a cluster bundle that parses: without one, a kubeconfig
// would trust the workstation's roots.
func TestAnAdminKubeconfigNeedsATrustBundleAndAnEndpoint(t *testing.T) {
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA(pki.CATemplate{CommonName: "cluster-ca", Validity: time.Hour}, key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.IssueKeyPair(pki.LeafTemplate{CommonName: "carousel:admin:test", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Hour}, pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := leaf.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	for _, tt := range []struct {
		name, endpoint string
		bundle         []byte
		want           string // "" for a kubeconfig
	}{
		{"a bundle and an endpoint", "https://api.prod.example:6443", ca.CertPEM(), ""},
		{"no bundle", "https://api.prod.example:6443", nil, "no CA bundle"},
		{"a bundle that does not parse", "https://api.prod.example:6443", []byte("-----BEGIN CERTIFICATE-----\nAAA\n"), "CA bundle"},
		{"an endpoint the operator refuses", "http://api.prod.example:6443", ca.CertPEM(), "must be an https URL"},
	} {
		cl.Spec.ControlPlane.Endpoint = tt.endpoint
		kubeconfig, err := adminKubeconfig(cl, tt.bundle, leaf.CertPEM(), keyPEM, "carousel:admin:test")
		switch {
		case tt.want == "" && (err != nil || !bytes.Contains(kubeconfig, []byte("certificate-authority-data"))):
			t.Errorf("%s: %v, %s", tt.name, err, kubeconfig)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.want)
		}
	}
}
