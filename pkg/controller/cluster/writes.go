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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// errStaleCache means that the cache is behind the API server: a create found
// the Cluster's own object there, or what it found was gone when read
// (whatHoldsTheName), or a Secret the cache does not hold is there and
// labelled (confirmAbsent). The reconcile is retried, so that nothing is
// generated twice.
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
// which the cache has not seen yet, or one gone since (errStaleCache: the
// pass is retried in a second); one on its way out, which is waited for with
// the controller's backoff; or one without the Cluster's carousel.dev/cluster
// label, which the cache never shows, so that no retry gets past it. That
// blocks the Cluster until a person relabels or deletes it (ObjectUnlabelled:
// the Cluster is its controller) or moves it out of the way (NameTaken:
// Carousel does not take over an unlabelled object it did not write).
func (r *Reconciler) whatHoldsTheName(ctx context.Context, c *v1alpha1.Cluster, obj client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, r.Client.Scheme())
	if err != nil {
		return err
	}
	found, err := r.readMetadata(ctx, gvk, client.ObjectKeyFromObject(obj))
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("creating %s: %w", obj.GetName(), errStaleCache)
	case err != nil:
		return fmt.Errorf("creating %s, whose name is taken: reading what holds it: %w", obj.GetName(), err)
	}
	return nameHolder(strings.ToLower(gvk.Kind), found, c)
}

// errIfBehind is errStaleCache, naming what (the object as the error speaks
// of it), when obj as read (through the cache) is behind the API server:
// gone there, or of another resourceVersion; the error of the read when it
// fails; nil otherwise.
func (r *Reconciler) errIfBehind(ctx context.Context, gvk schema.GroupVersionKind, obj client.Object, what string) error {
	there, err := r.readMetadata(ctx, gvk, client.ObjectKeyFromObject(obj))
	if apierrors.IsNotFound(err) || err == nil && there.ResourceVersion != obj.GetResourceVersion() {
		return fmt.Errorf("%s: %w", what, errStaleCache)
	}
	return err
}

// readMetadata reads the metadata of the object of kind gvk at key from the
// API server, past the cache (which shows only the Clusters' labelled
// objects), without its data: no key leaves the API server for it.
func (r *Reconciler) readMetadata(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey) (*metav1.PartialObjectMetadata, error) {
	found := &metav1.PartialObjectMetadata{}
	found.SetGroupVersionKind(gvk)
	return found, r.apiReader().Get(ctx, key, found)
}

// secretKind, configMapKind and clusterKind are the GroupVersionKinds of
// Secrets, ConfigMaps and Clusters, for readMetadata.
var (
	secretKind    = corev1.SchemeGroupVersion.WithKind("Secret")
	configMapKind = corev1.SchemeGroupVersion.WithKind("ConfigMap")
	clusterKind   = v1alpha1.SchemeGroupVersion.WithKind("Cluster")
)

// nameHolder is whatHoldsTheName's verdict on found, the object of that kind
// that holds the name of one of c's.
func nameHolder(kind string, found *metav1.PartialObjectMetadata, c *v1alpha1.Cluster) error {
	name := found.Name
	switch {
	case found.Labels[v1alpha1.LabelCluster] == c.Name:
		return fmt.Errorf("creating %s: %w", name, errStaleCache)
	case found.DeletionTimestamp != nil:
		return fmt.Errorf("creating %s: the %s that holds the name is being deleted (finalizers %v); waiting for it to go", name, kind, found.Finalizers)
	}
	if err := notTheClusters(kind, found, c); err != nil {
		return err
	}
	if ownedBy(found, c) {
		return blocked(v1alpha1.ReasonObjectUnlabelled,
			"%s %s, which Carousel wrote for this Cluster, lacks the label %s=%s, so the operator cannot see it; put it back: kubectl label --overwrite %s -n %s %s %s=%s (or delete it, and Carousel writes it again; to have it look at once then: %s)",
			kind, name, v1alpha1.LabelCluster, c.Name, kind, c.Namespace, name, v1alpha1.LabelCluster, c.Name, operationCommand(c, v1alpha1.OperationReconcile))
	}
	return blocked(v1alpha1.ReasonNameTaken,
		"%s %s is in the way: Carousel writes one of this Cluster's objects under that name, and this one lacks the label %s=%s and has no controller, so Carousel does not take it over. Delete it if it is a copy of Carousel's, recreate it under another name if it is someone else's; then, to have Carousel look at once: %s",
		kind, name, v1alpha1.LabelCluster, c.Name, operationCommand(c, v1alpha1.OperationReconcile))
}

// notTheClusters is the NameTaken stop for an object that holds the name of
// one of c's and is another's: one that another Cluster's label claims (the
// names of the two Clusters' objects collide), or one that another owner
// controls. It is nil for an object neither claims.
func notTheClusters(kind string, found metav1.Object, c *v1alpha1.Cluster) error {
	if other := found.GetLabels()[v1alpha1.LabelCluster]; other != "" && other != c.Name {
		return blocked(v1alpha1.ReasonNameTaken,
			"%s %s belongs to Cluster %s (label %s=%s): the names of the two Clusters' objects collide, and Carousel does not take it over; recreate one of the two Clusters under a name whose objects' names do not collide, or in another namespace",
			kind, found.GetName(), other, v1alpha1.LabelCluster, other)
	}
	if ref := metav1.GetControllerOf(found); ref != nil && ref.UID != c.UID {
		return blocked(v1alpha1.ReasonNameTaken,
			"%s %s is in the way: Carousel writes one of this Cluster's objects under that name, and this one is controlled by %s %s, so Carousel does not take it over; recreate it under another name",
			kind, found.GetName(), ref.Kind, ref.Name)
	}
	return nil
}

// operationCommand is the kubectl command that asks for operation on c.
func operationCommand(c *v1alpha1.Cluster, operation string) string {
	return fmt.Sprintf("kubectl annotate cluster.carousel.dev -n %s %s %s=%s", c.Namespace, c.Name, v1alpha1.OperationAnnotation, operation)
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
