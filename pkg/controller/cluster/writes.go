package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// errStaleCache means a create found the object already there: the cache has
// not seen an earlier write yet, or the object lost the labels by which the
// cache selects it; the callers that generated a key for it read the API
// server to tell which (readFirst). The reconcile is retried, so that nothing
// is generated twice.
var errStaleCache = errors.New("the cache is behind the API server; retrying")

// desiredSecret is the content a Secret must have.
type desiredSecret struct {
	name        string
	labels      map[string]string
	annotations map[string]string
	data        map[string][]byte
}

// writeSecret makes the named Secret hold exactly the desired labels,
// annotations and data, owned by the Cluster, and records the result in objs.
// It writes nothing when the Secret already does, and then records the
// Secret with the desired data: the cache holds derived values as digests
// (cacheSecret), and what reads objs after, the consumers' checksums, needs
// them whole. An update carries the resourceVersion that was read, so a
// write based on a stale read fails instead of overwriting a newer object.
func (r *Reconciler) writeSecret(ctx context.Context, c *v1alpha1.Cluster, objs *objects, want desiredSecret) error {
	existing := objs.secrets[want.name]
	if existing != nil && hasMeta(existing.Labels, want.labels) && hasMeta(existing.Annotations, want.annotations) &&
		ownedBy(existing, c) && sameData(existing.Data, want.data) {
		whole := *existing
		whole.Data = want.data
		objs.secrets[want.name] = &whole
		return nil
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: want.name, Namespace: c.Namespace}, Type: corev1.SecretTypeOpaque}
	if existing != nil {
		s = existing.DeepCopy()
	}
	s.Labels, s.Annotations = mergeMeta(s.Labels, want.labels), mergeMeta(s.Annotations, want.annotations)
	// A map of its own: want.data may be the cached Secret's (a fix of its
	// labels or owner only), and the write decodes the answer into it.
	s.Data = maps.Clone(want.data)
	if err := r.createOrUpdate(ctx, c, s, existing != nil); err != nil {
		return err
	}
	objs.secrets[want.name] = s
	return nil
}

// writeConfigMap is writeSecret for a ConfigMap with string data.
func (r *Reconciler) writeConfigMap(ctx context.Context, c *v1alpha1.Cluster, objs *objects, name string, labels, data map[string]string) error {
	existing := objs.configMaps[name]
	if existing != nil && hasMeta(existing.Labels, labels) && ownedBy(existing, c) && maps.Equal(existing.Data, data) {
		return nil
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
	if existing != nil {
		cm = existing.DeepCopy()
	}
	cm.Labels = mergeMeta(cm.Labels, labels)
	cm.Data = data
	if err := r.createOrUpdate(ctx, c, cm, existing != nil); err != nil {
		return err
	}
	objs.configMaps[name] = cm
	return nil
}

func (r *Reconciler) createOrUpdate(ctx context.Context, c *v1alpha1.Cluster, obj client.Object, exists bool) error {
	if err := controllerutil.SetControllerReference(c, obj, r.Client.Scheme()); err != nil {
		return err
	}
	if exists {
		if err := r.Client.Update(ctx, obj); err != nil {
			return fmt.Errorf("updating %s: %w", obj.GetName(), err)
		}
		return nil
	}
	err := r.Client.Create(ctx, obj)
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %s: %w", obj.GetName(), errStaleCache)
	}
	if err != nil {
		return fmt.Errorf("creating %s: %w", obj.GetName(), err)
	}
	return nil
}

func ownedBy(obj metav1.Object, c *v1alpha1.Cluster) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == c.UID
}

// hasMeta reports whether have contains every key of want with the same value.
func hasMeta(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func mergeMeta(have, want map[string]string) map[string]string {
	if len(want) == 0 {
		return have
	}
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, want)
	return out
}
