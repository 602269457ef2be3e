package kubeletcsr

import (
	"context"
	"errors"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/carousel-dev/carousel/pkg/scheme"
)

// The one controller serves every connection: a request is handled by its
// own cluster's reconciler, and never holds a worker, which every managed
// cluster shares, past the end of its connection or while its connection's
// CSRs are not listed.
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
	done := make(chan error, 1)
	go func() {
		_, err := cs.Reconcile(context.Background(), req) // the controller's context lives as long as the manager
		done <- err
	}()
	endConnection()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the request ended with %v, want the connection's end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request held its worker after its connection ended")
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
