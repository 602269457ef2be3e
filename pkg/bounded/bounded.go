// Package bounded reads from a managed API server, whose address a tenant
// writes (spec.controlPlane.endpoint) and may point at a server of its own,
// no more than a real one would answer: each answer up to MaxResponseBytes,
// each list up to MaxItems objects in MaxPages pages.
package bounded

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/pager"
)

// MaxResponseBytes bounds each answer of a managed API server, whose
// address a tenant writes (spec.controlPlane.endpoint) and may point at a
// server of its own: a page of 500 objects, or every APIService of a
// cluster, takes a few MiB.
const MaxResponseBytes = 16 << 20

// Responses fails the read of a response body past MaxResponseBytes: for
// one-shot reads (a watch's body is longer).
func Responses(next http.RoundTripper) http.RoundTripper {
	return promhttp.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil {
			resp.Body = &boundedBody{ReadCloser: resp.Body, left: MaxResponseBytes}
		}
		return resp, err
	})
}

// boundedBody is a response body that fails a read past left bytes, with an
// error that says so (io.LimitReader would end it quietly, as if complete;
// http.MaxBytesReader's error speaks of a request body).
type boundedBody struct {
	io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.left -= int64(n); b.left < 0 {
		return 0, fmt.Errorf("the API server's answer is larger than %d MiB", MaxResponseBytes>>20)
	}
	return n, err
}

// Bounds of one list: Kubernetes is tested with 10,000 namespaces, and a
// managed API server may be a tenant's, answering with pages of nothing
// that never end.
const (
	PageSize = 500
	MaxItems = 100_000
	MaxPages = 4 * MaxItems / PageSize
)

// EachItem pages through a list, PageSize objects at a time, one page
// ahead, and fails past MaxItems objects or MaxPages pages.
func EachItem[T any](ctx context.Context, list pager.ListPageFunc, each func(*T)) error {
	pages, items := 0, 0
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		if pages++; pages > MaxPages {
			return nil, fmt.Errorf("the list goes on past %d pages", MaxPages)
		}
		return list(ctx, opts)
	})
	p.PageSize, p.PageBufferSize = PageSize, 1
	return p.EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		if items++; items > MaxItems {
			return fmt.Errorf("the list holds more than %d objects", MaxItems)
		}
		item, ok := any(obj).(*T)
		if !ok {
			return fmt.Errorf("unexpected %T in a list", obj)
		}
		each(item)
		return nil
	})
}
