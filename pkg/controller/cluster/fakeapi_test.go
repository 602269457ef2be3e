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
// is, which counts the writes made to it. With throughCache set it reads
// Secrets and ConfigMaps as the manager's cache holds them (cacheSecret,
// cacheConfigMap), transformed twice as a watch-list sync does: it lists
// both so, and gets ConfigMaps so. apiServer reads them as they are.
type fakeAPI struct {
	client.WithWatch
	apiServer    client.Reader
	writes       atomic.Int64
	throughCache atomic.Bool
}

func newFakeAPI(c *v1alpha1.Cluster, objs ...client.Object) *fakeAPI {
	builder := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(append(objs, c)...).WithStatusSubresource(c)
	for _, obj := range []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}, &appsv1.Deployment{}, &appsv1.StatefulSet{}} {
		builder = builder.WithIndex(obj, clusterIndex, clusterLabel)
	}
	apiServer := builder.Build()
	api := &fakeAPI{apiServer: apiServer}
	count := func() { api.writes.Add(1) }
	// cached applies transform to obj twice, when the cache is read.
	cached := func(transform func(any) (any, error), obj any) error {
		if !api.throughCache.Load() {
			return nil
		}
		for range 2 {
			if _, err := transform(obj); err != nil {
				return err
			}
		}
		return nil
	}
	api.WithWatch = interceptor.NewClient(apiServer, interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := cl.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if cm, ok := obj.(*corev1.ConfigMap); ok {
				return cached(cacheConfigMap, cm)
			}
			return nil
		},
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := cl.List(ctx, list, opts...); err != nil {
				return err
			}
			switch l := list.(type) {
			case *corev1.SecretList:
				for i := range l.Items {
					if err := cached(cacheSecret, &l.Items[i]); err != nil {
						return err
					}
				}
			case *corev1.ConfigMapList:
				for i := range l.Items {
					if err := cached(cacheConfigMap, &l.Items[i]); err != nil {
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
	return api
}
