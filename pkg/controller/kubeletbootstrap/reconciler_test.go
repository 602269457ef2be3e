package kubeletbootstrap

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/clustercache"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// tokenSecret is a bootstrap-token Secret as the API server returns it,
// labelled for cluster; expires empty leaves the expiration out.
func tokenSecret(cluster, id, expires string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-" + id,
			Labels: map[string]string{v1alpha1.LabelBootstrapToken: cluster}},
		Type: bootstrapapi.SecretTypeBootstrapToken,
		Data: map[string][]byte{bootstrapapi.BootstrapTokenIDKey: []byte(id), bootstrapapi.BootstrapTokenSecretKey: []byte("0123456789abcdef"),
			bootstrapapi.BootstrapTokenUsageAuthentication: []byte("true"), bootstrapapi.BootstrapTokenExtraGroupsKey: []byte(bootstrap.Group(cluster))},
	}
	if expires != "" {
		s.Data[bootstrapapi.BootstrapTokenExpirationKey] = []byte(expires)
	}
	return s
}

func TestATokenLabelledForTheClusterThatDoesNotParseIsDeleted(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	live := tokenSecret("prod", "abcdef", now.Add(c.Spec.KubeletBootstrap.TokenTTLOrDefault()).Format(time.RFC3339))
	neverExpires := tokenSecret("prod", "ghijkl", "")
	garbled := tokenSecret("prod", "mnopqr", "next tuesday")
	others := tokenSecret("other", "stuvwx", "")
	remote := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(live, neverExpires, garbled, others).Build()
	r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(now)}

	tokens, _, _, err := r.ensureTokens(context.Background(), c, remote)
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != 1 || tokens[0].ID != "abcdef" {
		t.Errorf("tokens = %+v, want the live one alone (and no new one)", tokens)
	}
	for _, s := range []*corev1.Secret{neverExpires, garbled} {
		if err := remote.Get(context.Background(), client.ObjectKeyFromObject(s), &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: %v, want it deleted", s.Name, err)
		}
	}
	for _, s := range []*corev1.Secret{live, others} {
		if err := remote.Get(context.Background(), client.ObjectKeyFromObject(s), &corev1.Secret{}); err != nil {
			t.Errorf("%s: %v, want it kept", s.Name, err)
		}
	}
}

// A labelled Secret the API server would not authenticate as the token it
// holds (named for another, not of the bootstrap-token type, outside the
// Cluster's group) is deleted, never handed to new nodes; and a token that
// expired is deleted as the Secret listed, never another under its name.
func TestATokenSecretTheAPIServerWouldNotAuthenticateIsDeleted(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	fresh := now.Add(c.Spec.KubeletBootstrap.TokenTTLOrDefault()).Format(time.RFC3339)
	misnamed := tokenSecret("prod", "aaaaaa", now.Add(-time.Minute).Format(time.RFC3339))
	misnamed.Data[bootstrapapi.BootstrapTokenIDKey] = []byte("bbbbbb")
	kubeadms := tokenSecret("", "bbbbbb", fresh)
	kubeadms.Labels = nil
	opaque := tokenSecret("prod", "cccccc", fresh)
	opaque.Type = corev1.SecretTypeOpaque
	otherGroup := tokenSecret("prod", "dddddd", fresh)
	otherGroup.Data[bootstrapapi.BootstrapTokenExtraGroupsKey] = []byte("system:bootstrappers:kubeadm:default-node-token")
	remote := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(misnamed, kubeadms, opaque, otherGroup).Build()
	r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(now)}

	tokens, _, _, err := r.ensureTokens(context.Background(), c, remote)
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != 1 || tokens[0].ID == "cccccc" || tokens[0].ID == "dddddd" {
		t.Errorf("tokens = %+v, want one new token alone", tokens)
	}
	for _, s := range []*corev1.Secret{misnamed, opaque, otherGroup} {
		if err := remote.Get(context.Background(), client.ObjectKeyFromObject(s), &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: %v, want it deleted", s.Name, err)
		}
	}
	if err := remote.Get(context.Background(), client.ObjectKeyFromObject(kubeadms), &corev1.Secret{}); err != nil {
		t.Errorf("the unlabelled token %s: %v, want it kept", kubeadms.Name, err)
	}
}

// A token Secret being deleted (a finalizer holds it) is no token, and is
// not deleted again on every pass: a new token is issued.
func TestATokenSecretBeingDeletedIsLeftToGo(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	going := tokenSecret("prod", "aaaaaa", now.Add(time.Hour).Format(time.RFC3339))
	going.Finalizers = []string{"example.com/hold"}
	going.DeletionTimestamp = &metav1.Time{Time: now}
	deletes := 0
	remote := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(going).WithInterceptorFuncs(interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			deletes++
			return c.Delete(ctx, obj, opts...)
		},
	}).Build()
	r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(now)}
	tokens, _, _, err := r.ensureTokens(context.Background(), c, remote)
	if err != nil {
		t.Fatal(err)
	}
	if deletes != 0 || len(tokens) != 1 || tokens[0].ID == "aaaaaa" {
		t.Errorf("%d deletes, tokens %+v; want none deleted, and one new token", deletes, tokens)
	}
}

func TestAnExpiredTokenIsDeletedAsTheSecretListed(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	expired := tokenSecret("prod", "aaaaaa", now.Add(-time.Minute).Format(time.RFC3339))
	expired.UID = "listed"
	var preconditions []*types.UID
	remote := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(expired).WithInterceptorFuncs(interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			do := &client.DeleteOptions{}
			do.ApplyOptions(opts)
			if do.Preconditions != nil {
				preconditions = append(preconditions, do.Preconditions.UID)
			} else {
				preconditions = append(preconditions, nil)
			}
			return c.Delete(ctx, obj, opts...)
		},
	}).Build()
	r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(now)}
	if _, _, _, err := r.ensureTokens(context.Background(), c, remote); err != nil {
		t.Fatal(err)
	}
	if len(preconditions) != 1 || preconditions[0] == nil || *preconditions[0] != "listed" {
		t.Errorf("deletes with UID preconditions %v, want one, of the Secret listed", preconditions)
	}
}

// A deletion of an old token the managed cluster refuses (an admission
// policy on kube-system's Secrets) is reported, and a new token is issued all
// the same: new nodes need one, and the one left is not live.
func TestARefusedDeletionOfAnOldTokenStillIssuesANewOne(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	expired := tokenSecret("prod", "aaaaaa", now.Add(-time.Minute).Format(time.RFC3339))
	unreadable := tokenSecret("prod", "bbbbbb", "")
	remote := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(expired, unreadable).WithInterceptorFuncs(interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return apierrors.NewForbidden(corev1.Resource("secrets"), obj.GetName(), errors.New("deleting Secrets of kube-system is not allowed"))
		},
	}).Build()
	r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(now)}
	tokens, _, deletesRefused, err := r.ensureTokens(context.Background(), c, remote)
	if err != nil {
		t.Fatal(err)
	}
	if deletesRefused == nil || !strings.Contains(deletesRefused.Error(), "bootstrap-token-aaaaaa") || !strings.Contains(deletesRefused.Error(), "bootstrap-token-bbbbbb") {
		t.Errorf("refused deletions %v, want both Secrets'", deletesRefused)
	}
	if len(tokens) != 1 || tokens[0].ID == "aaaaaa" || tokens[0].ID == "bbbbbb" {
		t.Fatalf("tokens = %+v, want one new token alone", tokens)
	}
	if err := remote.Get(context.Background(), client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-" + tokens[0].ID}, &corev1.Secret{}); err != nil {
		t.Errorf("the new token's Secret: %v", err)
	}
}

// A token TTL written past the webhook (none at all, or of years) issues
// tokens of the nearer bound: not a token that expires at once, replaced at
// every pass, nor one that joins nodes for years.
func TestATokenTTLPastTheWebhookIssuesTokensWithinTheBounds(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		ttl  time.Duration
		want time.Duration
	}{{0, v1alpha1.MinBootstrapTokenTTL}, {2_000_000 * time.Hour, v1alpha1.MaxBootstrapTokenTTL}} {
		t.Run(tt.ttl.String(), func(t *testing.T) {
			c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"},
				Spec: v1alpha1.ClusterSpec{KubeletBootstrap: v1alpha1.KubeletBootstrapSpec{TokenTTL: &metav1.Duration{Duration: tt.ttl}}}}
			// The API server writes stringData into data; the fake does not.
			remote := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
				Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if s, ok := obj.(*corev1.Secret); ok {
						for k, v := range s.StringData {
							if s.Data == nil {
								s.Data = map[string][]byte{}
							}
							s.Data[k] = []byte(v)
						}
						s.StringData = nil
					}
					return cl.Create(ctx, obj, opts...)
				}}).Build()
			clock := clocktesting.NewFakePassiveClock(now)
			r := &Reconciler{Clock: clock}
			first, _, _, err := r.ensureTokens(context.Background(), c, remote)
			if err != nil {
				t.Fatal(err)
			}
			if len(first) != 1 || !first[0].Expires.Equal(now.Add(tt.want)) {
				t.Fatalf("tokens = %+v, want one that expires at %s", first, now.Add(tt.want))
			}
			clock.SetTime(now.Add(time.Second))
			second, _, _, err := r.ensureTokens(context.Background(), c, remote)
			if err != nil {
				t.Fatal(err)
			}
			if len(second) != 1 || second[0].ID != first[0].ID {
				t.Errorf("a second later, tokens = %+v, want the first one kept alone", second)
			}
		})
	}
}

// A pass is followed by another when the next token is due, at least every
// minute, and always: one that outlasted the moment the next token was due
// must not end the requeues, which would stop new tokens.
func TestLookAgainIn(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		next time.Time
		want time.Duration
	}{
		{now.Add(10 * time.Second), 10 * time.Second},
		{now.Add(2 * time.Hour), time.Minute},
		{now, time.Second},
		{now.Add(-3 * time.Second), time.Second},
	} {
		if got := lookAgainIn(tt.next, now); got != tt.want {
			t.Errorf("lookAgainIn(now%+v) = %s, want %s", tt.next.Sub(now), got, tt.want)
		}
	}
}

// The manager's cache shows only the Secrets labelled with a Cluster, so a
// bootstrap kubeconfig Secret that lost the label (or one someone else put
// under its name) is not found, and its create is refused AlreadyExists. It
// was then never updated: new nodes started with an expired token, and
// nothing said why. Now the pass fails, and, unless the cache is merely
// behind, a Warning event says how to put the label back.
func TestABootstrapKubeconfigSecretTheCacheCannotSeeIsReported(t *testing.T) {
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "a", UID: "uid-a"},
		Spec: v1alpha1.ClusterSpec{ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://192.0.2.1:6443"}}}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	token := bootstrap.Token{ID: "abcdef", Secret: "0123456789abcdef", Expires: now.Add(time.Hour)}
	name := credentials.BootstrapKubeconfigSecretName(c.Name)
	for _, tt := range []struct {
		name      string
		labels    map[string]string
		behind    bool // the cache has not seen the Secret yet
		wantErr   string
		wantEvent string
	}{
		{"the label removed", nil, false, "lacks the label carousel.dev/cluster=a", "lacks the label"},
		{"another Cluster's label", map[string]string{v1alpha1.LabelCluster: "b"}, false, "is labelled for Cluster b", "is labelled for Cluster b"},
		{"the cache behind", map[string]string{v1alpha1.LabelCluster: c.Name}, true, "the cache is behind", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			held := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name, Labels: tt.labels},
				Data: map[string][]byte{v1alpha1.DataKeyKubeconfig: []byte("stale")}}
			live := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(c, held).Build()
			cached := interceptor.NewClient(live, interceptor.Funcs{
				// As the manager's cache, which holds the Secrets that have the
				// label, whatever its value, once it has seen them.
				Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if err := cl.Get(ctx, key, obj, opts...); err != nil {
						return err
					}
					if _, labelled := obj.GetLabels()[v1alpha1.LabelCluster]; obj.GetName() == name && (!labelled || tt.behind) {
						return apierrors.NewNotFound(corev1.Resource("secrets"), name)
					}
					return nil
				}})
			recorder := events.NewFakeRecorder(10)
			r := &Reconciler{Client: cached, APIReader: live, Clock: clocktesting.NewFakePassiveClock(now), Recorder: recorder}

			err := r.publishKubeconfig(t.Context(), c, []byte("bundle"), []bootstrap.Token{token})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("publishKubeconfig = %v, want an error containing %q", err, tt.wantErr)
			}
			select {
			case e := <-recorder.Events:
				if tt.wantEvent == "" {
					t.Fatalf("event %q for a cache that is only behind", e)
				}
				if !strings.Contains(e, v1alpha1.EventBootstrapKubeconfigNotWritten) || !strings.Contains(e, tt.wantEvent) ||
					!strings.Contains(e, "kubectl label --overwrite secret -n fleet "+name+" carousel.dev/cluster=a") {
					t.Fatalf("event %q does not say %q and how to put the label back", e, tt.wantEvent)
				}
			default:
				if tt.wantEvent != "" {
					t.Fatal("no event")
				}
			}
			got := &corev1.Secret{}
			if err := live.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: name}, got); err != nil || string(got.Data[v1alpha1.DataKeyKubeconfig]) != "stale" {
				t.Errorf("the Secret holding the name was written over (%v)", err)
			}
		})
	}
}

// A binding of the name Carousel uses but bound to another role is made
// again: its roleRef cannot be updated (the API server refuses it, as the
// interceptor here does), and a pass that failed there would keep nothing
// after it (tokens, cluster-info) up to date.
func TestABindingToAnotherRoleIsMadeAgain(t *testing.T) {
	want := bootstrap.RBAC("prod")
	var binding *rbacv1.ClusterRoleBinding
	for _, obj := range want {
		if b, ok := obj.(*rbacv1.ClusterRoleBinding); ok && binding == nil {
			binding = b
		}
	}
	if binding == nil {
		t.Fatal("the bootstrap RBAC has no ClusterRoleBinding")
	}
	taken := binding.DeepCopy()
	taken.RoleRef.Name = "someone-elses-role"
	managed := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(taken).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if b, ok := obj.(*rbacv1.ClusterRoleBinding); ok {
				there := &rbacv1.ClusterRoleBinding{}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(b), there); err == nil && there.RoleRef != b.RoleRef {
					return apierrors.NewInvalid(rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding").GroupKind(), b.Name, nil)
				}
			}
			return cl.Update(ctx, obj, opts...)
		},
	}).Build()
	if err := ensure(t.Context(), managed, binding.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	got := &rbacv1.ClusterRoleBinding{}
	if err := managed.Get(t.Context(), client.ObjectKeyFromObject(binding), got); err != nil {
		t.Fatal(err)
	}
	if got.RoleRef != binding.RoleRef {
		t.Errorf("roleRef %+v, want %+v", got.RoleRef, binding.RoleRef)
	}
}

// A foreground deletion has the garbage collector delete the Cluster's
// Secrets and ConfigMaps before the Cluster: no connection can be made any
// more, and the cleanup goes through the one still live to the Cluster's
// endpoint instead of failing until the cleanup timeout; never through one
// to another endpoint (a Cluster of the same name, deleted, made again for
// another managed cluster).
func TestADeletedClusterWhoseCredentialsWentFirstIsCleanedUpThroughItsLiveConnection(t *testing.T) {
	const endpoint = "https://192.0.2.1:6443"
	for _, tt := range []struct {
		name      string
		liveHost  string
		wantClean bool
	}{
		{"a live connection to its endpoint", endpoint, true},
		{"a live connection to another endpoint", "https://192.0.2.2:6443", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "prod", Finalizers: []string{v1alpha1.FinalizerManagedCleanup}},
				Spec: v1alpha1.ClusterSpec{ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: endpoint}}}
			management := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(c).Build()
			if err := management.Delete(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			token := tokenSecret("prod", "abcdef", "")
			managed := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(token).Build()
			connections := &liveConnection{live: &clustercache.Connection{Config: &rest.Config{Host: tt.liveHost}, Client: managed}}
			r := &Reconciler{Client: management, Clock: clocktesting.NewFakeClock(time.Now()), Connections: connections}

			if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)}); err != nil {
				t.Fatal(err)
			}
			tokenGone := apierrors.IsNotFound(managed.Get(t.Context(), client.ObjectKeyFromObject(token), &corev1.Secret{}))
			released := apierrors.IsNotFound(management.Get(t.Context(), client.ObjectKeyFromObject(c), &v1alpha1.Cluster{}))
			if tokenGone != tt.wantClean || released != tt.wantClean || connections.disconnected != tt.wantClean {
				t.Errorf("token deleted %v, Cluster released %v, disconnected %v; want all %v", tokenGone, released, connections.disconnected, tt.wantClean)
			}
		})
	}
}

// A Cluster whose endpoint is cleared is cleaned up through the connection
// still live to the endpoint it had, and released; a deleted Cluster without
// an endpoint nor such a connection is released at once, with an event that
// says what is left, rather than after the cleanup timeout.
func TestAClusterWithoutAnEndpointIsCleanedUpThroughItsLiveConnection(t *testing.T) {
	for _, tt := range []struct {
		name      string
		deleted   bool
		connected bool
		wantClean bool
		wantEvent bool
	}{
		{"its endpoint cleared, still connected", false, true, true, false},
		{"deleted with its endpoint cleared, still connected", true, true, true, false},
		{"deleted with its endpoint cleared, no longer connected", true, false, false, true},
		{"its endpoint cleared, no longer connected", false, false, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "prod", Finalizers: []string{v1alpha1.FinalizerManagedCleanup}}}
			management := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(c).Build()
			if tt.deleted {
				if err := management.Delete(t.Context(), c); err != nil {
					t.Fatal(err)
				}
			}
			token := tokenSecret("prod", "abcdef", "")
			managed := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(token).Build()
			connections := &liveConnection{live: &clustercache.Connection{Config: &rest.Config{Host: "https://192.0.2.1:6443"}, Client: managed},
				disconnected: !tt.connected}
			recorder := events.NewFakeRecorder(10)
			r := &Reconciler{Client: management, Clock: clocktesting.NewFakeClock(time.Now()), Connections: connections, Recorder: recorder}

			result, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
			if err != nil || result.RequeueAfter != 0 {
				t.Fatalf("Reconcile = %+v, %v; want it done at once", result, err)
			}
			tokenGone := apierrors.IsNotFound(managed.Get(t.Context(), client.ObjectKeyFromObject(token), &corev1.Secret{}))
			got := &v1alpha1.Cluster{}
			err = management.Get(t.Context(), client.ObjectKeyFromObject(c), got)
			released := apierrors.IsNotFound(err) || err == nil && len(got.Finalizers) == 0
			if tokenGone != tt.wantClean || !released || connections.disconnects == 0 {
				t.Errorf("token deleted %v, released %v, disconnected %d times; want %v, true, once", tokenGone, released, connections.disconnects, tt.wantClean)
			}
			var note string
			if len(recorder.Events) > 0 {
				note = <-recorder.Events
			}
			if event := strings.Contains(note, v1alpha1.EventManagedCleanupAbandoned); event != tt.wantEvent {
				t.Errorf("a %s event: %v, want %v", v1alpha1.EventManagedCleanupAbandoned, event, tt.wantEvent)
			}
			// What cleanup deletes, the event names.
			for _, left := range []string{v1alpha1.LabelBootstrapToken + "=prod", v1alpha1.LabelServingAddresses + "=prod", bootstrap.BindingNodeBootstrapper,
				bootstrap.BindingNodeClient, bootstrap.BindingSelfNodeClient, bootstrap.ClusterInfoRole, bootstrap.NodeTrustRole, bootstrap.NodeTrustConfigMap} {
				if tt.wantEvent && !strings.Contains(note, left) {
					t.Errorf("the event %q does not name %s, which is left behind", note, left)
				}
			}
		})
	}
}

// The cleanup of a cleared endpoint that fails is tried again for a minute,
// the connection kept for it, before the Cluster is released without it:
// however many passes fail meanwhile (any change of the Cluster's Secrets
// starts one, and clearing the endpoint makes many).
func TestAFailedCleanupOfAClearedEndpointIsTriedAgain(t *testing.T) {
	management, connections, r, key := clearedEndpointFailingCleanup()
	recorder := r.Recorder.(*events.FakeRecorder)
	clock := r.Clock.(*clocktesting.FakeClock)
	type pass struct{ after, wantRetryIn time.Duration }
	passes := slices.Repeat([]pass{{0, cleanupRetry}}, 15) // more than the minute's worth, at once
	passes = append(passes, pass{30 * time.Second, cleanupRetry}, pass{25 * time.Second, cleanupRetry}, pass{4 * time.Second, time.Second})
	for step, p := range passes {
		clock.Step(p.after)
		result, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: key})
		want := p.wantRetryIn
		if err != nil || result.RequeueAfter != want || connections.disconnected || len(recorder.Events) > 0 {
			t.Fatalf("pass %d: %+v, %v, disconnected %v, %d events; want it tried again in %s, still connected", step, result, err,
				connections.disconnected, len(recorder.Events), want)
		}
	}
	clock.Step(time.Second)
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.Cluster{}
	if err := management.Get(t.Context(), key, got); err != nil || len(got.Finalizers) != 0 || !connections.disconnected {
		t.Fatalf("after %s: finalizers %v (%v), disconnected %v; want it released", clearedEndpointTimeout, got.Finalizers, err, connections.disconnected)
	}
	if event := <-recorder.Events; !strings.Contains(event, "after trying for 1m0s") {
		t.Errorf("event %q, want it to say the cleanup was given up after a minute", event)
	}
}

// The failed cleanups of an endpoint cleared, then set again, do not count
// when it is cleared again: its first failure is tried again, not the last
// of the minute.
func TestTheCleanupsOfAnEndpointSetAgainCountFromNaught(t *testing.T) {
	management, _, r, key := clearedEndpointFailingCleanup()
	setEndpoint := func(endpoint string) {
		t.Helper()
		got := &v1alpha1.Cluster{}
		if err := management.Get(t.Context(), key, got); err != nil {
			t.Fatal(err)
		}
		got.Spec.ControlPlane.Endpoint = endpoint
		if err := management.Update(t.Context(), got); err != nil {
			t.Fatal(err)
		}
	}
	clock := r.Clock.(*clocktesting.FakeClock)
	for range 12 {
		if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		clock.Step(cleanupRetry - time.Second)
	}
	setEndpoint("https://192.0.2.1:6443")
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	setEndpoint("")
	result, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: key})
	got := &v1alpha1.Cluster{}
	if getErr := management.Get(t.Context(), key, got); err != nil || getErr != nil || result.RequeueAfter != cleanupRetry || len(got.Finalizers) == 0 {
		t.Fatalf("the first failed cleanup of the endpoint cleared again: %+v, %v, finalizers %v (%v); want it tried again in %s", result, err,
			got.Finalizers, getErr, cleanupRetry)
	}
}

// clearedEndpointFailingCleanup is a Cluster whose endpoint was cleared,
// still connected to its managed cluster, whose cleanup fails, and its
// Reconciler (with a FakeRecorder).
func clearedEndpointFailingCleanup() (client.Client, *liveConnection, *Reconciler, client.ObjectKey) {
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "prod", Finalizers: []string{v1alpha1.FinalizerManagedCleanup}}}
	management := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(c).Build()
	managed := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		DeleteAllOf: func(context.Context, client.WithWatch, client.Object, ...client.DeleteAllOfOption) error {
			return apierrors.NewServiceUnavailable("the managed API server is restarting")
		}}).Build()
	connections := &liveConnection{live: &clustercache.Connection{Config: &rest.Config{Host: "https://192.0.2.1:6443"}, Client: managed}}
	r := &Reconciler{Client: management, Clock: clocktesting.NewFakeClock(time.Now()), Connections: connections, Recorder: events.NewFakeRecorder(10)}
	return management, connections, r, client.ObjectKeyFromObject(c)
}

// liveConnection is a managed cluster still connected whose connection can
// no longer be made: the Cluster's credentials are gone.
type liveConnection struct {
	live         *clustercache.Connection
	disconnected bool
	disconnects  int
}

func (l *liveConnection) Connect(context.Context, *v1alpha1.Cluster) (*clustercache.Connection, error) {
	return nil, clustercache.ErrNotIssued
}

func (l *liveConnection) Connection(client.ObjectKey) (*clustercache.Connection, bool) {
	return l.live, !l.disconnected
}

func (l *liveConnection) Disconnect(client.ObjectKey) {
	l.disconnected, l.disconnects = true, l.disconnects+1
}

// A Cluster whose managed cluster was never reached (its credentials not
// issued yet, its endpoint mistyped or down) gets no cleanup finalizer:
// nothing can have been written there, and its deletion would otherwise
// wait for a cleanup that cannot be made and end with a warning that names
// objects never written.
func TestAClusterNeverConnectedGetsNoFinalizer(t *testing.T) {
	for _, tt := range []struct {
		name    string
		connect error
	}{
		{"credentials not issued", clustercache.ErrNotIssued},
		{"endpoint unreachable", errors.New("reaching the managed API server at https://192.0.2.1:6443: connection refused")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "prod"}}
			c.Spec.ControlPlane.Endpoint = "https://192.0.2.1:6443"
			management := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(c).Build()
			r := &Reconciler{Client: management, Clock: clocktesting.NewFakeClock(time.Now()), Connections: failingConnect{tt.connect}}
			if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)}); !errors.Is(tt.connect, clustercache.ErrNotIssued) && err == nil {
				t.Error("a pass that could not connect succeeded")
			}
			got := &v1alpha1.Cluster{}
			if err := management.Get(t.Context(), client.ObjectKeyFromObject(c), got); err != nil || len(got.Finalizers) != 0 {
				t.Errorf("finalizers %v (%v), want none", got.Finalizers, err)
			}
		})
	}
}

// failingConnect connects to nothing.
type failingConnect struct{ err error }

func (f failingConnect) Connect(context.Context, *v1alpha1.Cluster) (*clustercache.Connection, error) {
	return nil, f.err
}

func (failingConnect) Connection(client.ObjectKey) (*clustercache.Connection, bool) {
	return nil, false
}

func (failingConnect) Disconnect(client.ObjectKey) {}

// What others put on an object ensure manages (a label, an annotation, a
// finalizer, an owner reference) stays when ensure updates its content, and
// an object whose content is already what ensure wants is not written,
// whatever else it carries; a missing controller reference is put back, and
// one to another owner replaced.
func TestEnsureKeepsWhatOthersPutOnTheObject(t *testing.T) {
	sch := scheme.New()
	cluster := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "prod", UID: "cluster-uid"}}
	kubeconfig := func(data string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: credentials.BootstrapKubeconfigSecretName("prod"),
			Labels: map[string]string{v1alpha1.LabelCluster: "prod"}}, Data: map[string][]byte{v1alpha1.DataKeyKubeconfig: []byte(data)}}
		if err := ctrl.SetControllerReference(cluster, s, sch); err != nil {
			t.Fatal(err)
		}
		return s
	}
	trust := func(data string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstrap.NodeTrustConfigMap},
			Data: map[string]string{"ca.crt": data}}
	}
	others := func(obj client.Object) client.Object {
		obj.SetLabels(labels.Merge(obj.GetLabels(), map[string]string{"team": "platform"}))
		obj.SetAnnotations(map[string]string{"argocd.argoproj.io/tracking-id": "platform"})
		obj.SetFinalizers([]string{"platform.example/audit"})
		obj.SetOwnerReferences(append(obj.GetOwnerReferences(), metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "other-uid"}))
		return obj
	}
	withoutController := func(s *corev1.Secret) *corev1.Secret { s.OwnerReferences = nil; return s }
	ownedByAnother := func(s *corev1.Secret) *corev1.Secret { s.OwnerReferences[0].UID = "stale-uid"; return s }
	for _, tc := range []struct {
		name        string
		have, want  client.Object
		wantUpdated bool
	}{
		{name: "a ConfigMap whose data changed", have: others(trust("old")), want: trust("new"), wantUpdated: true},
		{name: "a ConfigMap as wanted", have: others(trust("same")), want: trust("same")},
		{name: "a Secret whose data changed", have: others(kubeconfig("old")), want: kubeconfig("new"), wantUpdated: true},
		{name: "a Secret as wanted", have: others(kubeconfig("same")), want: kubeconfig("same")},
		{name: "a Secret without the controller reference", have: others(withoutController(kubeconfig("same"))), want: kubeconfig("same"), wantUpdated: true},
		{name: "a Secret controlled by another owner", have: others(ownedByAnother(kubeconfig("same"))), want: kubeconfig("same"), wantUpdated: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			updates := 0
			c := fake.NewClientBuilder().WithScheme(sch).WithObjects(tc.have).WithInterceptorFuncs(interceptor.Funcs{
				Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
					updates++
					return cl.Update(ctx, obj, opts...)
				},
			}).Build()
			if err := ensure(t.Context(), c, tc.want.DeepCopyObject().(client.Object)); err != nil {
				t.Fatal(err)
			}
			if got := updates > 0; got != tc.wantUpdated {
				t.Fatalf("updated %v, want %v", got, tc.wantUpdated)
			}
			got := tc.want.DeepCopyObject().(client.Object)
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(tc.want), got); err != nil {
				t.Fatal(err)
			}
			switch w := tc.want.(type) {
			case *corev1.ConfigMap:
				if d := got.(*corev1.ConfigMap).Data; !equality.Semantic.DeepEqual(d, w.Data) {
					t.Errorf("data %v, want %v", d, w.Data)
				}
			case *corev1.Secret:
				if d := got.(*corev1.Secret).Data; !equality.Semantic.DeepEqual(d, w.Data) {
					t.Errorf("data %q, want %q", d, w.Data)
				}
			}
			if got.GetLabels()["team"] != "platform" || got.GetAnnotations()["argocd.argoproj.io/tracking-id"] != "platform" ||
				!slices.Equal(got.GetFinalizers(), []string{"platform.example/audit"}) {
				t.Errorf("labels %v, annotations %v, finalizers %v: others' are gone", got.GetLabels(), got.GetAnnotations(), got.GetFinalizers())
			}
			for k, v := range tc.want.GetLabels() {
				if got.GetLabels()[k] != v {
					t.Errorf("label %s=%q, want %q", k, got.GetLabels()[k], v)
				}
			}
			refs := got.GetOwnerReferences()
			if !slices.ContainsFunc(refs, func(ref metav1.OwnerReference) bool { return ref.UID == "other-uid" }) {
				t.Errorf("owner references %v: the other owner's is gone", refs)
			}
			for _, want := range tc.want.GetOwnerReferences() {
				if !slices.ContainsFunc(refs, func(ref metav1.OwnerReference) bool { return equality.Semantic.DeepEqual(ref, want) }) {
					t.Errorf("owner references %v lack %v", refs, want)
				}
			}
			if n := len(slices.DeleteFunc(slices.Clone(refs), func(ref metav1.OwnerReference) bool { return !ptr.Deref(ref.Controller, false) })); n > 1 {
				t.Errorf("owner references %v name %d controllers", refs, n)
			}
		})
	}
}
