package cluster

import (
	"context"
	"sync/atomic"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// fakeAPI is an in-memory management cluster indexed as the manager's cache
// is, which counts the writes made to it. With throughCache set it lists
// Secrets and ConfigMaps as the manager's cache holds them (cacheSecret,
// cacheConfigMap), transformed twice as a watch-list sync does; a Get reads
// them as the API server holds them.
type fakeAPI struct {
	client.WithWatch
	writes       atomic.Int64
	throughCache atomic.Bool
}

func newFakeAPI(c *v1alpha1.Cluster, objs ...client.Object) *fakeAPI {
	api := &fakeAPI{}
	count := func() { api.writes.Add(1) }
	builder := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(append(objs, c)...).WithStatusSubresource(c).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := cl.List(ctx, list, opts...); err != nil {
				return err
			}
			if !api.throughCache.Load() {
				return nil
			}
			var cached []any
			transform := cacheSecret
			switch l := list.(type) {
			case *corev1.SecretList:
				for i := range l.Items {
					cached = append(cached, &l.Items[i])
				}
			case *corev1.ConfigMapList:
				for i := range l.Items {
					cached = append(cached, &l.Items[i])
				}
				transform = cacheConfigMap
			}
			for _, obj := range cached {
				for range 2 {
					if _, err := transform(obj); err != nil {
						return err
					}
				}
			}
			return nil
		},
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count()
			return cl.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count()
			return cl.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			count()
			return cl.Patch(ctx, obj, patch, opts...)
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			count()
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	for _, obj := range []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}, &appsv1.Deployment{}, &appsv1.StatefulSet{}} {
		builder = builder.WithIndex(obj, clusterIndex, clusterLabel)
	}
	api.WithWatch = builder.Build()
	return api
}
