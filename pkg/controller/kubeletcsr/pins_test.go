package kubeletcsr

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

func workerNode(uid string, addresses ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1", UID: k8stypes.UID(uid)}}
	for _, a := range addresses {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	return n
}

func readPin(t *testing.T, c client.Client) (*corev1.ConfigMap, []string) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: PinConfigMapName("worker-1")}, cm); err != nil {
		t.Fatalf("the pin: %v", err)
	}
	var addresses []string
	if err := json.Unmarshal([]byte(cm.Data[pinKeyAddresses]), &addresses); err != nil {
		t.Fatal(err)
	}
	return cm, addresses
}

// TestServingAddressPolicies walks one node through both policies: the
// first serving CSR under FirstSeen pins the Node's addresses in
// kube-system; an address the node adds to its own Node afterwards is denied
// under FirstSeen and approved under NodeStatus; a Node re-created under the
// same name gets a fresh pin.
func TestServingAddressPolicies(t *testing.T) {
	f := newFixture(t)
	f.cluster.Spec.KubeletBootstrap.CSRApproval.ServingAddresses = v1alpha1.ServingAddressesFirstSeen
	f.remote = append(f.remote, workerNode("uid-1", "10.0.0.7", "worker-1"))
	r, remote := f.build(nil)
	ctx := context.Background()
	serving := func(name string, sans ...string) *certificatesv1.CertificateSigningRequest {
		t.Helper()
		obj := kubeletCSR(t, name, certificatesv1.KubeletServingSignerName, testKey(t), f.clock.Now(), sans...)
		if err := remote.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		if _, err := reconcileCSR(t, r, name); err != nil {
			t.Fatal(err)
		}
		return getCSR(t, remote, name)
	}
	wantVerdict := func(obj *certificatesv1.CertificateSigningRequest, want certificatesv1.RequestConditionType, message string) {
		t.Helper()
		c, ok := hasCondition(obj, want)
		if !ok || !strings.Contains(c.Message, message) {
			t.Fatalf("%s: conditions %+v, want %s with %q", obj.Name, obj.Status.Conditions, want, message)
		}
	}

	wantVerdict(serving("first", "10.0.0.7", "worker-1"), certificatesv1.CertificateApproved, "first saw it")
	cm, pinned := readPin(t, remote)
	if !slices.Equal(pinned, []string{"10.0.0.7", "worker-1"}) || cm.Data[pinKeyUID] != "uid-1" || cm.Data[pinKeyNode] != "worker-1" ||
		cm.Labels[v1alpha1.LabelServingAddresses] != f.cluster.Name ||
		len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].Kind != "Node" || cm.OwnerReferences[0].UID != "uid-1" {
		t.Fatalf("pin %+v", cm)
	}

	node := &corev1.Node{}
	if err := remote.Get(ctx, client.ObjectKey{Name: "worker-1"}, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.9"})
	if err := remote.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	wantVerdict(serving("added-first-seen", "203.0.113.9"), certificatesv1.CertificateDenied, `"203.0.113.9" is not an address node "worker-1" had when Carousel first saw it`)
	if _, still := readPin(t, remote); !slices.Equal(still, pinned) {
		t.Fatalf("the pin moved to %v", still)
	}

	c := &v1alpha1.Cluster{}
	mgmt := r.management.(client.Client)
	if err := mgmt.Get(ctx, client.ObjectKeyFromObject(f.cluster), c); err != nil {
		t.Fatal(err)
	}
	c.Spec.KubeletBootstrap.CSRApproval.ServingAddresses = v1alpha1.ServingAddressesNodeStatus
	if err := mgmt.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	wantVerdict(serving("added-node-status", "203.0.113.9"), certificatesv1.CertificateApproved, "every SAN is an address of the node")

	c.Spec.KubeletBootstrap.CSRApproval.ServingAddresses = v1alpha1.ServingAddressesFirstSeen
	if err := mgmt.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := remote.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := remote.Create(ctx, workerNode("uid-2", "10.0.0.8", "worker-1")); err != nil {
		t.Fatal(err)
	}
	wantVerdict(serving("recreated", "10.0.0.8"), certificatesv1.CertificateApproved, "first saw it")
	if cm, pinned := readPin(t, remote); !slices.Equal(pinned, []string{"10.0.0.8", "worker-1"}) || cm.Data[pinKeyUID] != "uid-2" || cm.OwnerReferences[0].UID != "uid-2" {
		t.Fatalf("the re-created Node's pin: %+v", cm)
	}
}

// TestADecisionIsNotTakenOnACacheBehind: the first serving CSR of a node
// whose Node the cache shows without an address the API server has (the
// kubelet asks as soon as it reports it) is decided again once the cache
// caught up, and approved: with FirstSeen, instead of pinning the addresses
// the Node had, for good, and denying it; with NodeStatus, where no pin is
// written, instead of denying it for good.
func TestADecisionIsNotTakenOnACacheBehind(t *testing.T) {
	for _, policy := range []v1alpha1.ServingAddressPolicy{v1alpha1.ServingAddressesFirstSeen, v1alpha1.ServingAddressesNodeStatus} {
		t.Run(string(policy), func(t *testing.T) {
			f := newFixture(t)
			f.cluster.Spec.KubeletBootstrap.CSRApproval.ServingAddresses = policy
			obj := kubeletCSR(t, "s", certificatesv1.KubeletServingSignerName, testKey(t), testNow, "10.0.0.7", "203.0.113.9")
			f.remote = append(f.remote, workerNode("uid-1", "10.0.0.7", "203.0.113.9"), obj)
			r, _ := f.build(nil)
			behind := true
			remote := cacheShows(r, workerNode("uid-1", "10.0.0.7"), &behind)
			res, err := reconcileCSR(t, r, "s")
			if err != nil || res.RequeueAfter != transientRetry {
				t.Fatalf("Reconcile = %+v, %v, want a retry", res, err)
			}
			if got := getCSR(t, remote, "s"); len(got.Status.Conditions) != 0 {
				t.Fatalf("decided on a Node the cache shows behind: %+v", got.Status.Conditions)
			}
			if err := remote.Get(t.Context(), client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: PinConfigMapName("worker-1")}, &corev1.ConfigMap{}); err == nil {
				t.Fatal("pinned the addresses of a Node the cache shows behind")
			}
			behind = false
			if _, err := reconcileCSR(t, r, "s"); err != nil {
				t.Fatal(err)
			}
			if _, approved := hasCondition(getCSR(t, remote, "s"), certificatesv1.CertificateApproved); !approved {
				t.Fatal("not approved once the cache caught up")
			}
			if policy == v1alpha1.ServingAddressesFirstSeen {
				if _, pinned := readPin(t, remote); !slices.Equal(pinned, []string{"10.0.0.7", "203.0.113.9"}) {
					t.Fatalf("pinned %v, want both addresses", pinned)
				}
			}
		})
	}
}

// With servingAddresses NodeStatus, a serving CSR naming an address the
// cache still shows on its Node, which the API server shows it no longer
// has (moved to another node), is not approved on the cache: it is decided
// again once the cache caught up, and denied.
func TestAnApprovalIsNotTakenOnACacheBehind(t *testing.T) {
	f := newFixture(t)
	f.cluster.Spec.KubeletBootstrap.CSRApproval.ServingAddresses = v1alpha1.ServingAddressesNodeStatus
	obj := kubeletCSR(t, "s", certificatesv1.KubeletServingSignerName, testKey(t), testNow, "10.0.0.7", "10.0.0.9")
	f.remote = append(f.remote, workerNode("uid-1", "10.0.0.7"), obj)
	r, _ := f.build(nil)
	behind := true
	remote := cacheShows(r, workerNode("uid-1", "10.0.0.7", "10.0.0.9"), &behind)
	res, err := reconcileCSR(t, r, "s")
	if err != nil || res.RequeueAfter != transientRetry {
		t.Fatalf("Reconcile = %+v, %v, want a retry", res, err)
	}
	if got := getCSR(t, remote, "s"); len(got.Status.Conditions) != 0 {
		t.Fatalf("decided on a Node the cache shows behind: %+v", got.Status.Conditions)
	}
	behind = false
	if _, err := reconcileCSR(t, r, "s"); err != nil {
		t.Fatal(err)
	}
	if _, denied := hasCondition(getCSR(t, remote, "s"), certificatesv1.CertificateDenied); !denied {
		t.Fatal("not denied once the cache caught up")
	}
}

// cacheShows has r read cached, in place of the Node, while *behind: a
// cache behind the API server, which the uncached reads (latestNode) are not.
func cacheShows(r *csrReconciler, cached *corev1.Node, behind *bool) client.Client {
	remote := interceptor.NewClient(r.remote.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if node, typed := obj.(*corev1.Node); typed && *behind { // read through the cache
				cached.DeepCopyInto(node)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	r.remote = remote
	return remote
}

// TestUnreadablePinLeavesPending: when the pin cannot be read, the request
// is neither approved nor denied, and the error is returned for a retry.
func TestUnreadablePinLeavesPending(t *testing.T) {
	f := newFixture(t)
	f.cluster.Spec.KubeletBootstrap.CSRApproval.ServingAddresses = v1alpha1.ServingAddressesFirstSeen
	obj := kubeletCSR(t, "s", certificatesv1.KubeletServingSignerName, testKey(t), testNow, "10.0.0.7")
	f.remote = append(f.remote, workerNode("uid-1", "10.0.0.7"), obj)
	r, _ := f.build(nil)
	failure := errors.New("etcdserver: request timed out")
	remote := interceptor.NewClient(r.remote.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, pin := obj.(*unstructured.Unstructured); pin {
				return failure
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	r.remote = remote
	if _, err := reconcileCSR(t, r, "s"); !errors.Is(err, failure) {
		t.Fatalf("Reconcile = %v, want the read error", err)
	}
	if got := getCSR(t, remote, "s"); len(got.Status.Conditions) != 0 {
		t.Fatalf("decided without the pin: %+v", got.Status.Conditions)
	}
}

// TestConcurrentPinIsNotOverwritten: a pin written by another evaluation
// between the read and the write makes this one decide again on that pin.
func TestConcurrentPinIsNotOverwritten(t *testing.T) {
	f := newFixture(t)
	f.cluster.Spec.KubeletBootstrap.CSRApproval.ServingAddresses = v1alpha1.ServingAddressesFirstSeen
	obj := kubeletCSR(t, "s", certificatesv1.KubeletServingSignerName, testKey(t), testNow, "10.0.0.7")
	f.remote = append(f.remote, workerNode("uid-1", "10.0.0.7"), obj)
	r, _ := f.build(nil)
	raced := false
	remote := interceptor.NewClient(r.remote.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if cm, ok := obj.(*corev1.ConfigMap); ok && !raced {
				raced = true
				other := cm.DeepCopy()
				other.Data[pinKeyAddresses] = `["10.0.0.9"]`
				if err := c.Create(ctx, other); err != nil {
					return err
				}
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	r.remote = remote
	res, err := reconcileCSR(t, r, "s")
	if err != nil || res.RequeueAfter != transientRetry {
		t.Fatalf("Reconcile = %+v, %v, want a retry", res, err)
	}
	if got := getCSR(t, remote, "s"); len(got.Status.Conditions) != 0 {
		t.Fatalf("decided on a pin that lost the race: %+v", got.Status.Conditions)
	}
	if _, err := reconcileCSR(t, r, "s"); err != nil {
		t.Fatal(err)
	}
	if _, denied := hasCondition(getCSR(t, remote, "s"), certificatesv1.CertificateDenied); !denied {
		t.Fatal("not decided on the pin that won")
	}
}
