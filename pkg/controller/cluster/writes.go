package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// errStaleCache means a create found the Cluster's own object already there:
// the cache has not seen an earlier write yet (whatHoldsTheName). The
// reconcile is retried, so that nothing is generated twice.
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
		return r.whatHoldsTheName(ctx, c, obj)
	}
	if err != nil {
		return fmt.Errorf("creating %s: %w", obj.GetName(), err)
	}
	return nil
}

// whatHoldsTheName says why the API server refused to create obj, whose name
// is taken, from the metadata of what holds it: the Cluster's own object,
// which the cache has not seen yet, or one on its way out (errStaleCache: the
// pass is retried), or one without the Cluster's carousel.dev/cluster label,
// which the cache never shows, so that no retry gets past it. That blocks the
// Cluster until a person relabels or deletes it (ObjectUnlabelled: the
// Cluster is its controller) or moves it out of the way (NameTaken: Carousel
// does not take over an unlabelled object it did not write).
func (r *Reconciler) whatHoldsTheName(ctx context.Context, c *v1alpha1.Cluster, obj client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, r.Client.Scheme())
	if err != nil {
		return err
	}
	found := &metav1.PartialObjectMetadata{}
	found.SetGroupVersionKind(gvk)
	err = r.apiReader().Get(ctx, client.ObjectKeyFromObject(obj), found)
	switch {
	case apierrors.IsNotFound(err), err == nil && (found.Labels[v1alpha1.LabelCluster] == c.Name || found.DeletionTimestamp != nil):
		return fmt.Errorf("creating %s: %w", obj.GetName(), errStaleCache)
	case err != nil:
		return fmt.Errorf("creating %s, whose name is taken: reading what holds it: %w", obj.GetName(), err)
	}
	kind, name := strings.ToLower(gvk.Kind), obj.GetName()
	lookAgain := fmt.Sprintf("kubectl annotate cluster.carousel.dev -n %s %s %s=%s", c.Namespace, c.Name, v1alpha1.OperationAnnotation, v1alpha1.OperationReconcile)
	if ownedBy(found, c) {
		return blocked(v1alpha1.ReasonObjectUnlabelled,
			"%s %s, which Carousel wrote for this Cluster, lacks the label %s=%s, so the operator cannot see it; put it back: kubectl label --overwrite %s -n %s %s %s=%s (or delete it, and Carousel writes it again; to have it look at once then: %s)",
			kind, name, v1alpha1.LabelCluster, c.Name, kind, c.Namespace, name, v1alpha1.LabelCluster, c.Name, lookAgain)
	}
	return blocked(v1alpha1.ReasonNameTaken,
		"%s %s is in the way: Carousel writes one of this Cluster's objects under that name, and this one lacks the label %s=%s and is not controlled by the Cluster, so Carousel does not take it over. Delete it if it is a copy of Carousel's, rename it if it is someone else's; then, to have Carousel look at once: %s",
		kind, name, v1alpha1.LabelCluster, c.Name, lookAgain)
}

// nameTaken reports whether err stopped a Cluster on a create whose name an
// object the cache cannot see holds (whatHoldsTheName).
func nameTaken(err error) bool {
	var b *blockedError
	return errors.As(err, &b) && (b.reason == v1alpha1.ReasonObjectUnlabelled || b.reason == v1alpha1.ReasonNameTaken)
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
