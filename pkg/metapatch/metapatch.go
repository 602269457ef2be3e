// Package metapatch makes patches of an object's metadata that hold only
// what changed: JSON merge patches of its annotations, and the JSON patch that
// removes one finalizer. controller-runtime's MergeFrom marshals the whole
// object twice and compares the two documents: a Cluster carries a status of
// some kilobytes, and setting or removing its operation annotation with
// MergeFrom made 0.6 GB of garbage in a fleet of 1,000 Clusters through two
// rotations.
package metapatch

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnotationsFrom is the patch that takes an object's annotations from
// before to what the object passed to Patch holds: a key added or changed
// is set, a key gone is removed (null). The patch carries the object's
// resourceVersion, so that it fails with a conflict when the object changed
// since it was read, as MergeFromWithOptimisticLock does; an object without
// one is an error, not a write without the check.
func AnnotationsFrom(before map[string]string) client.Patch { return annotations{before: before} }

type annotations struct{ before map[string]string }

func (annotations) Type() types.PatchType { return types.MergePatchType }

func (p annotations) Data(obj client.Object) ([]byte, error) {
	if obj.GetResourceVersion() == "" {
		return nil, fmt.Errorf("patching the annotations of %s: it has no resourceVersion to patch on", obj.GetName())
	}
	after := obj.GetAnnotations()
	changed := map[string]*string{}
	for k := range p.before {
		if _, kept := after[k]; !kept {
			changed[k] = nil
		}
	}
	for k, v := range after {
		if old, had := p.before[k]; !had || old != v {
			changed[k] = &v
		}
	}
	type metadata struct {
		ResourceVersion string             `json:"resourceVersion"`
		Annotations     map[string]*string `json:"annotations"`
	}
	return json.Marshal(struct {
		Metadata metadata `json:"metadata"`
	}{metadata{ResourceVersion: obj.GetResourceVersion(), Annotations: changed}})
}

// FinalizerRemoved is the JSON patch that removes finalizer from the object
// passed to Patch, every copy of it, found by their indexes there, after
// testing that each is still at its index (the API server answers 422
// Invalid when one is not): a merge patch would write the whole list as the
// caller read it, dropping a finalizer another controller added since, and
// with the optimistic lock it would fail on any change of the object (a
// status write too). An object without the finalizer is an error.
func FinalizerRemoved(finalizer string) client.Patch { return finalizerRemoved(finalizer) }

type finalizerRemoved string

func (finalizerRemoved) Type() types.PatchType { return types.JSONPatchType }

func (f finalizerRemoved) Data(obj client.Object) ([]byte, error) {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value string `json:"value,omitempty"`
	}
	var ops []op
	finalizers := obj.GetFinalizers()
	for i := len(finalizers) - 1; i >= 0; i-- { // the last first: a removal moves those after it
		if finalizers[i] == string(f) {
			path := fmt.Sprintf("/metadata/finalizers/%d", i)
			ops = append(ops, op{Op: "test", Path: path, Value: string(f)}, op{Op: "remove", Path: path})
		}
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("removing finalizer %s of %s: it has none", string(f), obj.GetName())
	}
	return json.Marshal(ops)
}
