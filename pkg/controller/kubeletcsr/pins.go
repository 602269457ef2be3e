package kubeletcsr

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/csr"
)

// Data keys of a pin ConfigMap.
const (
	pinKeyNode      = "node"
	pinKeyUID       = "uid"
	pinKeyAddresses = "addresses" // a JSON array of strings
)

// PinConfigMapName names the ConfigMap in kube-system that pins the
// addresses of a Node: a digest of the name, which can be longer than a
// ConfigMap name may be.
func PinConfigMapName(node string) string {
	sum := sha256.Sum256([]byte(node))
	return "carousel-serving-addresses-" + hex.EncodeToString(sum[:10])
}

// pinStore keeps the address pins of a managed cluster's Nodes: one
// ConfigMap per Node in kube-system, where the Node authorizer lets no node
// write, owned by its Node so that the garbage collector removes it with the
// Node.
type pinStore struct {
	client  client.Client // the managed cluster
	cluster string        // the Cluster's name, the value of v1alpha1.LabelServingAddresses
}

// get reads the pin of a Node, nil when there is none, and the ConfigMap it
// came from. It reads from the API server, not from a cache: a pin is
// decided once, so it must not be decided on a stale read, and a cache
// would watch every ConfigMap of the cluster.
func (s pinStore) get(ctx context.Context, node string) (*csr.AddressPin, *corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	if err := getPastCache(ctx, s.client, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: PinConfigMapName(node)}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	pin := &csr.AddressPin{Node: cm.Data[pinKeyNode], UID: cm.Data[pinKeyUID]}
	if err := json.Unmarshal([]byte(cm.Data[pinKeyAddresses]), &pin.Addresses); err != nil {
		// Not a pin Carousel wrote: none, so it is pinned again (and
		// overwritten, only if it did not change meanwhile).
		return nil, cm, nil
	}
	return pin, cm, nil
}

// getPastCache reads obj from the API server, not from the cache of c, a
// managed cluster's client: that cache holds typed objects only, and the
// client sends an unstructured read to the API server (package clustercache
// makes it so), which is then converted into obj.
func getPastCache(ctx context.Context, c client.Client, key client.ObjectKey, obj client.Object) error {
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := c.Get(ctx, key, u); err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj)
}

// put records a pin: it creates the ConfigMap, or replaces existing (the pin
// of an earlier Node of that name) only if it did not change since it was
// read. A concurrent writer makes it fail with a conflict or AlreadyExists.
func (s pinStore) put(ctx context.Context, pin *csr.AddressPin, existing *corev1.ConfigMap) error {
	addresses, err := json.Marshal(pin.Addresses)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: metav1.NamespaceSystem, Name: PinConfigMapName(pin.Node),
			Labels: map[string]string{v1alpha1.LabelServingAddresses: s.cluster},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: pin.Node, UID: types.UID(pin.UID),
			}},
		},
		Data: map[string]string{pinKeyNode: pin.Node, pinKeyUID: pin.UID, pinKeyAddresses: string(addresses)},
	}
	if existing == nil {
		err = s.client.Create(ctx, cm)
	} else {
		cm.ResourceVersion = existing.ResourceVersion
		err = s.client.Update(ctx, cm)
	}
	if err != nil {
		return fmt.Errorf("writing ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return nil
}
