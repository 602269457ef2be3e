package workerrollout

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/pki/pkitest"
)

func bundleConfigMap(c *v1alpha1.Cluster, role v1alpha1.CARole, data string) client.Object {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, role)},
		Data:       map[string]string{v1alpha1.DataKeyCABundle: data},
	}
}

// TestTrustReadsBothBundles: what Carousel expects of a node names the
// cluster bundle and the kubelet bundle, each from its own ConfigMap, and
// waits (NotFound) while either is not published.
func TestTrustReadsBothBundles(t *testing.T) {
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	cluster := bundleConfigMap(c, v1alpha1.CARoleCluster, "cluster CA0+CA1")
	kubelet := bundleConfigMap(c, v1alpha1.CARoleKubelet, "kubelet CA0+CA1")
	for _, tt := range []struct {
		name     string
		objects  []client.Object
		want     noderenewal.Trust
		notFound bool
	}{
		{"both published", []client.Object{cluster, kubelet},
			noderenewal.Trust{Cluster: []byte("cluster CA0+CA1"), Kubelet: []byte("kubelet CA0+CA1")}, false},
		{"no kubelet bundle yet", []client.Object{cluster}, noderenewal.Trust{}, true},
		{"no cluster bundle yet", []client.Object{kubelet}, noderenewal.Trust{}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &InPlaceRollout{Management: fake.NewClientBuilder().WithObjects(tt.objects...).Build()}
			got, err := p.trust(context.Background(), c)
			if tt.notFound {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("trust = %v, want NotFound", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Cluster) != string(tt.want.Cluster) || string(got.Kubelet) != string(tt.want.Kubelet) {
				t.Fatalf("trust = {%q, %q}, want {%q, %q}", got.Cluster, got.Kubelet, tt.want.Cluster, tt.want.Kubelet)
			}
		})
	}
}

// The bundles are read through Bundles, past a cache that may not show the
// ones the same pass of the Cluster wrote.
func TestTrustReadsTheBundlesPastTheCache(t *testing.T) {
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	cache := fake.NewClientBuilder().WithObjects(bundleConfigMap(c, v1alpha1.CARoleCluster, "cluster CA0+CA1"),
		bundleConfigMap(c, v1alpha1.CARoleKubelet, "kubelet CA0+CA1")).Build()
	apiServer := fake.NewClientBuilder().WithObjects(bundleConfigMap(c, v1alpha1.CARoleCluster, "cluster CA1"),
		bundleConfigMap(c, v1alpha1.CARoleKubelet, "kubelet CA1")).Build()
	p := &InPlaceRollout{Management: cache, Bundles: apiServer}
	got, err := p.trust(context.Background(), c)
	if err != nil || string(got.Cluster) != "cluster CA1" || string(got.Kubelet) != "kubelet CA1" {
		t.Fatalf("trust = {%q, %q}, %v; want the bundles the API server has", got.Cluster, got.Kubelet, err)
	}
}

// TestTrustInAbortingIsTheOldCAsAlone: in Aborting, nodes are to trust each
// role's CA of before the rotation alone, from the CA Secrets, while the
// published bundles still hold both CAs; whether or not the abort has
// swapped the CAs back yet.
func TestTrustInAbortingIsTheOldCAsAlone(t *testing.T) {
	const rotation = "2026-11-27T09:00:00Z"
	newCA := func(name string) *pki.KeyPair {
		key, _ := pki.GenerateKey(pki.ECDSAP256)
		ca, err := pki.NewCA(pki.CATemplate{CommonName: name, Validity: time.Hour}, key, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	old := map[v1alpha1.CARole]*pki.KeyPair{v1alpha1.CARoleCluster: newCA("cluster CA0"), v1alpha1.CARoleKubelet: newCA("kubelet CA0")}
	next := map[v1alpha1.CARole]*pki.KeyPair{v1alpha1.CARoleCluster: newCA("cluster CA1"), v1alpha1.CARoleKubelet: newCA("kubelet CA1")}
	for _, swapped := range []bool{false, true} {
		c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
		c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{
			CertificateAuthorities: &v1alpha1.CARotation{Phase: v1alpha1.RotationAborting}}}
		objects := []client.Object{bundleConfigMap(c, v1alpha1.CARoleCluster, "cluster CA0+CA1"), bundleConfigMap(c, v1alpha1.CARoleKubelet, "kubelet CA0+CA1")}
		for role := range old {
			cas := &credentials.CAs{Current: next[role], Previous: old[role], Rotation: rotation}
			if swapped {
				cas = &credentials.CAs{Current: old[role], Previous: next[role], Rotation: rotation, AbortedRotation: rotation}
			}
			data, err := credentials.EncodeCASecretData(cas)
			if err != nil {
				t.Fatal(err)
			}
			annotations := map[string]string{v1alpha1.AnnotationRotation: cas.Rotation}
			if cas.AbortedRotation != "" {
				annotations[v1alpha1.AnnotationAbortedRotation] = cas.AbortedRotation
			}
			objects = append(objects, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.CASecretName(c.Name, role),
				Annotations: annotations}, Data: data})
		}
		p := &InPlaceRollout{Management: fake.NewClientBuilder().WithObjects(objects...).Build()}
		got, err := p.trust(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Cluster, old[v1alpha1.CARoleCluster].CertPEM()) || !bytes.Equal(got.Kubelet, old[v1alpha1.CARoleKubelet].CertPEM()) {
			t.Errorf("swapped %t: trust = {%q, %q}, want the old CAs alone", swapped, got.Cluster, got.Kubelet)
		}
	}
}

// TestTrustPublished: a pool's nodes are asked only once the node trust
// ConfigMap in the managed cluster holds what they are to end up with.
func TestTrustPublished(t *testing.T) {
	want := noderenewal.Trust{Cluster: []byte("cluster CA0"), Kubelet: []byte("kubelet CA0")}
	published := func(cluster, kubelet string) client.Object {
		return bootstrap.NodeTrust([]byte(cluster), []byte(kubelet))
	}
	for name, tc := range map[string]struct {
		objects  []client.Object
		wantWait bool
	}{
		"published":                    {[]client.Object{published("cluster CA0", "kubelet CA0")}, false},
		"the bundles of before":        {[]client.Object{published("cluster CA0+CA1", "kubelet CA0+CA1")}, true},
		"the kubelet bundle of before": {[]client.Object{published("cluster CA0", "kubelet CA0+CA1")}, true},
		"not published yet":            {nil, true},
	} {
		remote := fake.NewClientBuilder().WithObjects(tc.objects...).Build()
		wait, err := trustPublished(context.Background(), remote, v1alpha1.WorkerPool{Name: "edge"}, want)
		if err != nil {
			t.Fatal(err)
		}
		if (wait != "") != tc.wantWait {
			t.Errorf("%s: wait %q, want a wait: %t", name, wait, tc.wantWait)
		}
		if wait != "" && !strings.Contains(wait, "pool edge") {
			t.Errorf("%s: the wait does not name the pool: %q", name, wait)
		}
	}
}

// TestInFlight: a node asked in this rotation and not answered holds its
// slot; one asked in an earlier rotation and never heard from does not.
func TestAskedThisRotation(t *testing.T) {
	started := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	rot := &v1alpha1.CARotation{Phase: v1alpha1.RotationAborting, LastInitiationTime: &metav1.Time{Time: started},
		AbortRolledBackTime: &metav1.Time{Time: started.Add(time.Hour)}}
	asked := func(initiated time.Time, phase v1alpha1.CARotationPhase, answered bool) map[string]string {
		req := noderenewal.Request{Initiated: initiated, Phase: phase}.String()
		a := map[string]string{v1alpha1.AnnotationRenewCredentials: req}
		if answered {
			a[v1alpha1.AnnotationCredentialsRenewed] = req
		}
		return a
	}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        bool
	}{
		{"asked in Preparing, not answered", asked(started, v1alpha1.RotationPreparing, false), true},
		{"asked in the abort's first roll, not answered", asked(started, v1alpha1.RotationAborting, false), true},
		{"asked in Preparing, answered", asked(started, v1alpha1.RotationPreparing, true), false},
		{"asked in an earlier rotation, never answered", asked(started.Add(-24*time.Hour), v1alpha1.RotationFinalizing, false), false},
		{"never asked", nil, false},
	} {
		if got := askedThisRotation(tc.annotations, rot); got != tc.want {
			t.Errorf("%s: askedThisRotation = %t, want %t", tc.name, got, tc.want)
		}
	}
	if askedThisRotation(asked(started, v1alpha1.RotationPreparing, false), &v1alpha1.CARotation{}) {
		t.Error("a rotation without a start time has a node in flight")
	}
}

// TestNodesMayMoveOnlyOnThePhasesCAs: in Finalizing, and in Aborting once
// rolled back, nodes move only when no role's Secret holds a previous CA any
// more, not as soon as the client CA's is gone: the cluster controller drops
// them role after role, the kubelet CA's after the client's, and nodes asked
// in between would install a kubelet bundle with both CAs and be asked
// again. In Preparing, and in Aborting before it rolled back, a cache behind
// the pass that wrote the CAs shows the Secrets of before, which agree with
// Carousel's certificate of before: nodes moved on them (a Replace pool
// replaced, kubelets signed from the old client CA) for nothing.
func TestNodesMayMoveOnlyOnThePhasesCAs(t *testing.T) {
	ctx := context.Background()
	started := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	rotation := started.Format(time.RFC3339)
	pool := v1alpha1.WorkerPool{Name: "pool-a", RolloutStrategy: v1alpha1.RolloutInPlace}
	current := map[v1alpha1.CARole]*pki.KeyPair{}
	previous := map[v1alpha1.CARole]*pki.KeyPair{}
	for _, role := range v1alpha1.CARoles() {
		current[role], previous[role] = pkitest.NewCA(t, string(role)+" current"), pkitest.NewCA(t, string(role)+" previous")
	}
	operatorCert, err := current[v1alpha1.CARoleClient].IssueKeyPair(pki.LeafTemplate{CommonName: "carousel-operator",
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Hour}, pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	all := v1alpha1.CARoles()
	// The operator's certificate is from each case's current client CA;
	// in a cache behind the pass that wrote the CAs, the Secrets of before
	// agree with it too.
	for _, tc := range []struct {
		name       string
		phase      v1alpha1.CARotationPhase
		kept       []v1alpha1.CARole // roles whose Secret still holds a previous CA
		rotation   string            // the CA Secrets' rotation annotation
		swapped    bool              // the abort swapped the CAs back
		rolledBack bool
		wantMove   bool
	}{
		{"Preparing, the new CAs written, Carousel's certificate on the new client CA", v1alpha1.RotationPreparing, all, rotation, false, false, true},
		{"Preparing, a cache that shows the CAs of before the rotation", v1alpha1.RotationPreparing, nil, "2026-05-01T09:00:00Z", false, false, false},
		{"Finalizing, every old CA dropped", v1alpha1.RotationFinalizing, nil, rotation, false, false, true},
		{"Finalizing, the kubelet CA's not yet", v1alpha1.RotationFinalizing, []v1alpha1.CARole{v1alpha1.CARoleKubelet}, rotation, false, false, false},
		{"Finalizing, the client CA's not yet", v1alpha1.RotationFinalizing, []v1alpha1.CARole{v1alpha1.CARoleClient}, rotation, false, false, false},
		{"Aborting, swapped back, Carousel's certificate on the old client CA", v1alpha1.RotationAborting, all, rotation, true, false, true},
		{"Aborting, a cache that shows the CAs of before the swap", v1alpha1.RotationAborting, all, rotation, false, false, false},
		{"Aborting, rolled back, every new CA deleted", v1alpha1.RotationAborting, nil, rotation, true, true, true},
		{"Aborting, rolled back, the cluster CA's not yet", v1alpha1.RotationAborting, []v1alpha1.CARole{v1alpha1.CARoleCluster}, rotation, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge"}}
			rot := &v1alpha1.CARotation{Phase: tc.phase, LastInitiationTime: &metav1.Time{Time: started}}
			if tc.rolledBack {
				rot.AbortRolledBackTime = &metav1.Time{Time: started.Add(time.Hour)}
			}
			c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: rot}}
			objects := []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace,
				Name: credentials.CertificateSecretName(c.Name, credentials.CertOperator)},
				Data: map[string][]byte{v1alpha1.DataKeyCertificate: operatorCert.CertPEM()}}}
			for _, role := range all {
				cas := &credentials.CAs{Current: current[role], Rotation: tc.rotation}
				if slices.Contains(tc.kept, role) {
					cas.Previous = previous[role]
				}
				if tc.swapped {
					cas.AbortedRotation = tc.rotation
				}
				objects = append(objects, caSecret(t, c, role, cas))
			}
			_, wait, err := nodesMayMove(ctx, fake.NewClientBuilder().WithObjects(objects...).Build(), c, pool)
			if err != nil {
				t.Fatal(err)
			}
			if moves := wait == ""; moves != tc.wantMove {
				t.Errorf("nodesMayMove waits for %q; want the nodes to move: %t", wait, tc.wantMove)
			}
		})
	}
}

// noConnections reaches no managed cluster.
type noConnections struct{}

func (noConnections) Client(*v1alpha1.Cluster) (client.Client, bool) { return nil, false }

// TestARolloutThatCannotReadTheNodesForgetsThemBehind: a rollout that cannot
// reach the managed cluster (its API server may be away) drops what it saw
// of the nodes behind: when the API server is back, they count from anew,
// not from before the outage.
func TestARolloutThatCannotReadTheNodesForgetsThemBehind(t *testing.T) {
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	offline := &OfflineNodes{}
	offline.Confirmed(client.ObjectKeyFromObject(c), "w3", true, t0)
	p := &InPlaceRollout{Connections: noConnections{}, Offline: offline}
	if done, wait, err := p.Rollout(context.Background(), c, v1alpha1.WorkerPool{Name: "a"}); done || err != nil || !strings.Contains(wait, "waiting to reach") {
		t.Fatalf("Rollout = %t, %q, %v; want it waiting to reach the API server", done, wait, err)
	}
	if offline.Confirmed(client.ObjectKeyFromObject(c), "w3", true, t0.Add(OfflineConfirmation)) {
		t.Error("a node seen behind before the API server was out of reach is offline at the first look since")
	}
}

// someConnection reaches every managed cluster through one client.
type someConnection struct{ remote client.Client }

func (s someConnection) Client(*v1alpha1.Cluster) (client.Client, bool) { return s.remote, true }

// TestARolloutThatFailsOnTheManagementClusterKeepsTheNodesBehind: a read of
// the management cluster that fails says nothing of the managed cluster's
// nodes: what was seen of them behind stands (another pool's failure must
// not keep a node behind from ever counting offline).
func TestARolloutThatFailsOnTheManagementClusterKeepsTheNodesBehind(t *testing.T) {
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	offline := &OfflineNodes{}
	offline.Confirmed(client.ObjectKeyFromObject(c), "w3", true, t0)
	management := interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("the management API server is away")
		},
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("the management API server is away")
		},
	})
	p := &InPlaceRollout{Connections: someConnection{fake.NewClientBuilder().Build()}, Management: management, Bundles: management, Offline: offline}
	if _, _, err := p.Rollout(context.Background(), c, v1alpha1.WorkerPool{Name: "a"}); err == nil {
		t.Fatal("Rollout gave no error with the management cluster away")
	}
	if !offline.Confirmed(client.ObjectKeyFromObject(c), "w3", true, t0.Add(OfflineConfirmation)) {
		t.Error("a failed read of the management cluster dropped what was seen of the managed cluster's nodes")
	}
}

// AskNodes asks the nodes not asked for the phase yet, as an administrator
// annotating them would, and writes nothing for one asked already or one
// deleted since it was listed.
func TestAskNodesAsksOnlyTheNodesNotAskedForThePhase(t *testing.T) {
	initiated := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{
		Phase: v1alpha1.RotationAborting, LastInitiationTime: &metav1.Time{Time: initiated}}}}
	aborting := noderenewal.Request{Initiated: initiated, Phase: v1alpha1.RotationAborting}.String()
	preparing := noderenewal.Request{Initiated: initiated, Phase: v1alpha1.RotationPreparing}.String()
	node := func(name, request string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			v1alpha1.AnnotationRenewCredentials: request, v1alpha1.AnnotationCredentialsRenewed: preparing}}}
	}
	var patches int
	remote := fake.NewClientBuilder().WithObjects(node("renewed-for-preparing", preparing), node("asked-already", aborting), node("refused", preparing)).
		WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			patches++
			if obj.GetName() == "refused" {
				return apierrors.NewForbidden(corev1.Resource("nodes"), "refused", errors.New("refused by policy"))
			}
			return c.Patch(ctx, obj, patch, opts...)
		}}).Build()
	p := &InPlaceRollout{Connections: someConnection{remote}}
	listed := []corev1.Node{*node("refused", preparing), *node("renewed-for-preparing", preparing), *node("asked-already", aborting), *node("deleted-since", preparing)}

	asked, err := p.AskNodes(context.Background(), c, listed)
	if !apierrors.IsForbidden(err) || !slices.Equal(asked, []string{"renewed-for-preparing"}) {
		t.Fatalf("AskNodes = %v, %v; want renewed-for-preparing asked, though the node before it could not be", asked, err)
	}
	got := &corev1.Node{}
	if err := remote.Get(context.Background(), client.ObjectKey{Name: "renewed-for-preparing"}, got); err != nil ||
		got.Annotations[v1alpha1.AnnotationRenewCredentials] != aborting {
		t.Fatalf("renewed-for-preparing asked for %q (%v), want %q", got.Annotations[v1alpha1.AnnotationRenewCredentials], err, aborting)
	}

	patches = 0
	if asked, err := p.AskNodes(context.Background(), c, []corev1.Node{*got, *node("asked-already", aborting)}); err != nil || len(asked) != 0 || patches != 0 {
		t.Errorf("asking again: %v, %v, %d patches; want nothing asked nor written", asked, err, patches)
	}
}
