package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/rotation"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// A check that keeps failing on a connection reset gives the same condition
// each time, whatever local port each attempt used: its message names the
// API server, not the connection's local address.
func TestAnUnreachableConditionLeavesOutTheLocalAddress(t *testing.T) {
	reset := func(port int) error {
		return &url.Error{Op: "Get", URL: "https://192.0.2.1:6443/version", Err: &net.OpError{Op: "read", Net: "tcp",
			Source: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 11), Port: port}, Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 6443},
			Err: syscall.ECONNRESET}}
	}
	first, second := unreachable("", reset(54321)).Message, unreachable("", reset(54322)).Message
	if first != second {
		t.Errorf("the messages differ:\n%s\n%s", first, second)
	}
	if want := `Get "https://192.0.2.1:6443/version": read tcp 192.0.2.1:6443: connection reset by peer`; first != want {
		t.Errorf("message %q, want %q", first, want)
	}
	if got := unreachable("not yet: ", errors.New("x509: certificate signed by unknown authority")).Message; got != "not yet: x509: certificate signed by unknown authority" {
		t.Errorf("message %q: an error without a connection is kept as it is", got)
	}
}

// An API server serving a certificate outside its validity fails every
// check with Go's error, which names the current time: the condition names
// the certificate's validity instead, so that a check failing the same way
// writes the status once, not on every poll.
func TestAnUnreachableConditionLeavesOutTheCurrentTime(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	served, err := pki.NewCA(pki.CATemplate{CommonName: "kube-apiserver", Validity: time.Hour}, key, now)
	if err != nil {
		t.Fatal(err)
	}
	expiredAt := func(at time.Time) error {
		_, err := served.Cert.Verify(x509.VerifyOptions{Roots: pki.NewBundle(served.Cert).CertPool(), CurrentTime: at})
		if err == nil {
			t.Fatal("an expired certificate verified")
		}
		return &url.Error{Op: "Get", URL: "https://192.0.2.1:6443/version", Err: &tls.CertificateVerificationError{Err: err}}
	}
	first, second := unreachable("", expiredAt(now.Add(2*time.Hour))).Message, unreachable("", expiredAt(now.Add(3*time.Hour))).Message
	if first != second {
		t.Errorf("the messages differ:\n%s\n%s", first, second)
	}
	if want := "the certificate served is valid from " + served.Cert.NotBefore.UTC().Format(time.RFC3339) + " until 2026-11-29T13:00:00Z, not now"; !strings.Contains(first, want) {
		t.Errorf("message %q lacks %q", first, want)
	}
}

// The old-client probe is valid as long as the old client CA, and an old CA
// expired already signs none: the old CAs are dropped all the same, instead
// of every pass failing on a certificate that cannot be issued.
func TestTheOldClientProbeLivesAsLongAsTheOldCA(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	old, err := pki.NewCA(pki.CATemplate{CommonName: "client CA0", Validity: 30 * 24 * time.Hour}, key, now)
	if err != nil {
		t.Fatal(err)
	}
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "fleet"},
		Spec: v1alpha1.ClusterSpec{ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://192.0.2.1:6443"}}}
	all := map[v1alpha1.CARole]*credentials.CAs{v1alpha1.CARoleClient: {Current: old, Previous: old}}
	for _, tt := range []struct {
		name string
		at   time.Time
		want time.Time // the probe's NotAfter; zero: no probe
	}{
		{"the old CA valid", now, old.Cert.NotAfter},
		{"the old CA expired", old.Cert.NotAfter.Add(time.Minute), time.Time{}},
	} {
		api := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
		r := &Reconciler{Client: api, Clock: clocktesting.NewFakeClock(tt.at)}
		objs := &objects{secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}}
		if err := r.ensureOldClientProbe(context.Background(), c, objs, all); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		probe := objs.secrets[oldClientProbeSecret(c)]
		var notAfter time.Time
		if probe != nil {
			kp, err := pki.ParseKeyPair(probe.Data[v1alpha1.DataKeyCertificate], probe.Data[v1alpha1.DataKeyPrivateKey])
			if err != nil {
				t.Fatal(err)
			}
			notAfter = kp.Cert.NotAfter
		}
		if !notAfter.Equal(tt.want) {
			t.Errorf("%s: the probe is valid until %s, want %s", tt.name, notAfter, tt.want)
		}
	}
}

// A check that passed does not hide one that failed earlier in the same pass;
// a pass whose checks all passed says the API server is reachable.
func TestAPassedCheckDoesNotHideAFailedOne(t *testing.T) {
	failed := unreachable("the API server does not accept the new client CA yet: ", errors.New("connection refused"))
	passed := reachability(metav1.ConditionTrue, v1alpha1.ReasonEndpointReachable, "the API server lists its service-account token Secrets")
	s := &scope{}
	if err := s.observe(failed, errManagedCheckFailed); err != nil {
		t.Fatal(err)
	}
	_ = s.observe(passed, nil)
	if s.reachability != failed || !s.managedCheckFailed {
		t.Errorf("after a failed then a passed check: %+v (failed %v), want the failure", s.reachability, s.managedCheckFailed)
	}
	s = &scope{}
	_ = s.observe(passed, nil)
	if s.reachability != passed {
		t.Errorf("after a passed check: %+v, want it", s.reachability)
	}
}

// A pass that decides the next phase and then fails to delete a probe
// records no new phase: the status the failed pass writes would say
// Completed beside the old CAs in the inventory and the conditions of
// Finalizing.
func TestAPassThatFailsAfterItsDecisionKeepsThePhase(t *testing.T) {
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "fleet"}}
	setCARotation(c, &v1alpha1.CARotation{Phase: v1alpha1.RotationFinalizing})
	probe := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: oldClientProbeSecret(c)}}
	refused := errors.New("secrets is forbidden")
	api := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(probe).WithInterceptorFuncs(interceptor.Funcs{
		Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error { return refused },
	}).Build()
	r := &Reconciler{Client: api, Clock: clocktesting.NewFakeClock(time.Now())}
	s := &scope{cluster: c, objs: &objects{secrets: map[string]*corev1.Secret{probe.Name: probe}, configMaps: map[string]*corev1.ConfigMap{}},
		facts: rotation.Facts{Phase: v1alpha1.RotationFinalizing, AllOnNewCA: true, OldCAsRemoved: true, ConsumersRolledOut: true,
			Evidence: rotation.EvidencePassed, KubeRootCA: rotation.EvidencePassed, APIServices: rotation.EvidencePassed}}
	if d := rotation.Decide(s.facts); d.Phase != v1alpha1.RotationCompleted {
		t.Fatalf("the facts decide %s, want Completed", d.Phase)
	}
	if err := r.decisionPhase(context.Background(), s); !errors.Is(err, refused) {
		t.Fatalf("decisionPhase = %v, want the refused delete", err)
	}
	if phase := c.CARotationPhase(); phase != v1alpha1.RotationFinalizing {
		t.Errorf("the failed pass records phase %s, want Finalizing", phase)
	}
}

// A phase that holds up nothing (the worker pools) does not stop the phases
// after it when it fails (the evidence, the decision): the pass fails with
// its error once they ran. Any other phase's failure stops the pass.
func TestAPhaseThatHoldsUpNothingLetsTheOthersRun(t *testing.T) {
	pools, other := errors.New("pool edge: listing Nodes: timeout"), errors.New("deleting a probe: forbidden")
	var ran []string
	step := func(name string, err error) func(context.Context, *scope) error {
		return func(context.Context, *scope) error { ran = append(ran, name); return err }
	}
	err := runPhases(context.Background(), &scope{}, []phase{
		{name: "worker pools", run: step("worker pools", pools), holdsUpNothing: true},
		{name: "evidence", run: step("evidence", nil)},
		{name: "decision", run: step("decision", other)},
		{name: "old-CA usage", run: step("old-CA usage", nil)},
	})
	if !errors.Is(err, other) || !errors.Is(err, pools) || !slices.Equal(ran, []string{"worker pools", "evidence", "decision"}) {
		t.Errorf("ran %q, err %v; want the three up to the decision, and both errors", ran, err)
	}
	ran = nil
	err = runPhases(context.Background(), &scope{}, []phase{
		{name: "worker pools", run: step("worker pools", pools), holdsUpNothing: true},
		{name: "evidence", run: step("evidence", nil)},
	})
	if !errors.Is(err, pools) || len(ran) != 2 {
		t.Errorf("ran %q, err %v; want both, and the pools' error", ran, err)
	}
	ran = nil
	err = runPhases(context.Background(), &scope{}, []phase{
		{name: "worker pools", run: step("worker pools", errStaleCache), holdsUpNothing: true},
		{name: "evidence", run: step("evidence", nil)},
	})
	if !errors.Is(err, errStaleCache) || len(ran) != 1 {
		t.Errorf("ran %q, err %v; want a stale read to stop the pass", ran, err)
	}
	var workers *phase
	for _, p := range (&Reconciler{}).phases() {
		if p.name == "worker pools" {
			workers = &p
		}
	}
	if workers == nil || !workers.holdsUpNothing {
		t.Errorf("the worker pools' phase holds up the evidence and the decision: %+v", workers)
	}
}
