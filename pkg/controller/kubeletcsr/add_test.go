package kubeletcsr

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// The one controller serves every connection: a request is handled by its
// own cluster's reconciler, and never holds a worker, which every managed
// cluster shares, past the end of its connection, past RequestTimeout, or
// while its connection's CSRs are not listed.
func TestControllersRouteARequestToItsConnection(t *testing.T) {
	key := client.ObjectKey{Namespace: "fleet", Name: "a"}
	// A cache that cannot answer: a read waits for its context, as a read
	// of a connection's cache does while the connection is torn down.
	stuck := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, _ client.WithWatch, _ client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
			<-ctx.Done()
			return ctx.Err()
		},
	}).Build()
	reconciler := &csrReconciler{cluster: key, remote: stuck}
	req := Request{Cluster: key, Name: "csr-1"}

	cs := &Controllers{}
	if res, err := cs.Reconcile(t.Context(), req); err != nil || !res.IsZero() {
		t.Fatalf("a request of a cluster not connected: %+v, %v; want it skipped", res, err)
	}

	connCtx, endConnection := context.WithCancel(context.Background())
	listed := false
	c := &connected{reconciler: reconciler, ctx: connCtx, synced: func() bool { return listed }}
	cs.clusters = map[client.ObjectKey]*connected{key: c}
	if res, err := cs.Reconcile(t.Context(), req); err != nil || res.RequeueAfter != notListedRetry {
		t.Fatalf("a request while the connection's CSRs are not listed: %+v, %v; want it looked at again in %s", res, err, notListedRetry)
	}

	listed = true
	// reconcile handles req, the controller's context living as long as
	// the manager, and returns its error once then is done.
	reconcile := func(then func()) error {
		done := make(chan error, 1)
		go func() {
			_, err := cs.Reconcile(context.Background(), req)
			done <- err
		}()
		then()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("a request held its worker")
			return nil
		}
	}
	cs.RequestTimeout = 50 * time.Millisecond
	if err := reconcile(func() {}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request the managed cluster never answers ended with %v, want its timeout", err)
	}
	cs.RequestTimeout = time.Hour
	if err := reconcile(endConnection); !errors.Is(err, context.Canceled) {
		t.Fatalf("the request ended with %v, want the connection's end", err)
	}

	newer := &connected{reconciler: reconciler, ctx: context.Background(), synced: func() bool { return true }}
	cs.clusters[key] = newer
	cs.forget(key, c)
	if cs.clusters[key] != newer {
		t.Fatal("an ended connection forgot the connection that replaced it")
	}
	cs.forget(key, newer)
	if _, ok := cs.clusters[key]; ok {
		t.Fatal("an ended connection is still handled")
	}
}

// Nodes and bootstrap-token Secrets, which only some requests read, are
// watched from the first such read, which does not wait for their listing:
// until they are listed, a Node or a token reads as not there yet (the
// request stays pending for a moment), and no worker, which every managed
// cluster shares, waits for a managed API server to list them.
func TestTheFirstReadOfANodeOrATokenStartsTheirInformerWithoutWaiting(t *testing.T) {
	informers := &listingInformers{listed: map[string]bool{}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1", UID: "uid-1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.7"}}}}
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-abcdef",
		Labels: map[string]string{v1alpha1.LabelBootstrapToken: "prod"}}, Type: bootstrapapi.SecretTypeBootstrapToken,
		Data: map[string][]byte{bootstrapapi.BootstrapTokenIDKey: []byte("abcdef"), bootstrapapi.BootstrapTokenSecretKey: []byte("0123456789abcdef"),
			bootstrapapi.BootstrapTokenExpirationKey:       []byte(time.Now().Add(time.Hour).UTC().Format(time.RFC3339)),
			bootstrapapi.BootstrapTokenUsageAuthentication: []byte("true"), bootstrapapi.BootstrapTokenExtraGroupsKey: []byte(bootstrap.Group("prod"))}}
	r := &csrReconciler{remote: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(node, token).Build(), informers: informers,
		clock: clocktesting.NewFakeClock(time.Now())}
	prod := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod"}}
	if _, ok := r.node(t.Context(), node.Name); ok {
		t.Error("a Node read before the Nodes are listed")
	}
	if r.isCarouselToken(t.Context(), prod, "abcdef") {
		t.Error("a token read before the Secrets are listed")
	}
	if want := []string{"*v1.Node", "*v1.Secret"}; !slices.Equal(informers.started, want) {
		t.Fatalf("informers started: %v, want %v", informers.started, want)
	}
	informers.listed["*v1.Node"], informers.listed["*v1.Secret"] = true, true
	if got, ok := r.node(t.Context(), node.Name); !ok || !slices.Equal(got.Addresses, []string{"10.0.0.7"}) {
		t.Errorf("once the Nodes are listed: %+v, %v; want the node's address", got, ok)
	}
	if !r.isCarouselToken(t.Context(), prod, "abcdef") {
		t.Error("once the Secrets are listed, the Cluster's token is not one")
	}
}

// listingInformers start informers whose listing the test decides, by kind.
type listingInformers struct {
	cache.Informers
	started []string
	listed  map[string]bool
}

func (l *listingInformers) GetInformer(_ context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	kind := fmt.Sprintf("%T", obj)
	l.started = append(l.started, kind)
	return listingInformer{kind: kind, listed: l.listed}, nil
}

type listingInformer struct {
	cache.Informer
	kind   string
	listed map[string]bool
}

func (l listingInformer) HasSynced() bool { return l.listed[l.kind] }

// A change of a Cluster's approval policy queues the requests of its
// managed cluster that wait for a decision, and no other: one left for an
// administrator is otherwise looked at again only at its deletion, a day
// later.
func TestAChangedApprovalPolicyQueuesThePendingRequests(t *testing.T) {
	key := client.ObjectKey{Namespace: "fleet", Name: "a"}
	csr := func(name, signer string, decided ...certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequest {
		obj := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certificatesv1.CertificateSigningRequestSpec{SignerName: signer}}
		for _, c := range decided {
			obj.Status.Conditions = append(obj.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: c, Status: corev1.ConditionTrue})
		}
		return obj
	}
	remote := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(
		csr("client-pending", certificatesv1.KubeAPIServerClientKubeletSignerName),
		csr("serving-pending", certificatesv1.KubeletServingSignerName),
		csr("approved", certificatesv1.KubeAPIServerClientKubeletSignerName, certificatesv1.CertificateApproved),
		csr("denied", certificatesv1.KubeletServingSignerName, certificatesv1.CertificateDenied),
		csr("another-signer", certificatesv1.KubeAPIServerClientSignerName),
	).Build()
	cs := &Controllers{clusters: map[client.ObjectKey]*connected{key: {reconciler: &csrReconciler{cluster: key, remote: remote}, synced: func() bool { return true }}}}
	cluster := func(client, serving v1alpha1.ApprovalMode) *v1alpha1.Cluster {
		c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		c.Spec.KubeletBootstrap.CSRApproval.Client, c.Spec.KubeletBootstrap.CSRApproval.Serving = client, serving
		return c
	}
	queued := func(old, updated *v1alpha1.Cluster) []string {
		queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[Request]())
		defer queue.ShutDown()
		cs.approvalChanged(t.Context(), event.TypedUpdateEvent[*v1alpha1.Cluster]{ObjectOld: old, ObjectNew: updated}, queue)
		var names []string
		for queue.Len() > 0 {
			req, _ := queue.Get()
			if req.Cluster != key {
				t.Errorf("queued %+v, a request of another Cluster", req)
			}
			names = append(names, req.Name)
			queue.Done(req)
		}
		slices.Sort(names)
		return names
	}
	if got, want := queued(cluster(v1alpha1.ApprovalManual, v1alpha1.ApprovalManual), cluster(v1alpha1.ApprovalAuto, v1alpha1.ApprovalManual)),
		[]string{"client-pending", "serving-pending"}; !slices.Equal(got, want) {
		t.Errorf("client approval made Auto: queued %v, want %v", got, want)
	}
	if got := queued(cluster(v1alpha1.ApprovalAuto, v1alpha1.ApprovalManual), cluster(v1alpha1.ApprovalAuto, v1alpha1.ApprovalManual)); len(got) != 0 {
		t.Errorf("an update that leaves the policy as it was queued %v", got)
	}
	cs.clusters[key].synced = func() bool { return false }
	if got := queued(cluster(v1alpha1.ApprovalAuto, v1alpha1.ApprovalManual), cluster(v1alpha1.ApprovalAuto, v1alpha1.ApprovalAuto)); len(got) != 0 {
		t.Errorf("a connection whose CSRs are not listed yet queued %v; its listing queues them", got)
	}
}
