package kubeletbootstrap

import (
	"slices"
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// owners decodes an object's owner references from data, a byte each: its
// UID from the low three bits (repeats dropped, as the API server keeps UIDs
// unique), a controller from bit 3 (only the first: an object has at most
// one).
func owners(data []byte) []metav1.OwnerReference {
	var refs []metav1.OwnerReference
	controller := false
	for _, b := range data {
		uid := types.UID("uid-" + strconv.Itoa(int(b&7)))
		if slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == uid }) {
			continue
		}
		ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "owner-" + strconv.Itoa(int(b>>4)), UID: uid}
		if b&8 != 0 && !controller {
			ref.Controller, controller = ptr.To(true), true
		}
		refs = append(refs, ref)
	}
	return refs
}

// FuzzWithOwners: what ensure makes of an object's owner references holds
// each it wants as it wants it, keeps every other in its order (but another
// controller, when it wants one), names at most one controller, and changes
// nothing laid over again.
func FuzzWithOwners(f *testing.F) {
	f.Add([]byte{0x08, 0x01}, []byte{0x19})
	f.Add([]byte{0x01, 0x0a, 0x02}, []byte{0x0a})
	f.Add([]byte{0x01, 0x02}, []byte{})
	f.Add([]byte{}, []byte{0x0b, 0x03})
	f.Fuzz(func(t *testing.T, haveData, wantData []byte) {
		have, want := owners(haveData), owners(wantData)
		got := withOwners(have, want)
		isController := func(r metav1.OwnerReference) bool { return ptr.Deref(r.Controller, false) }
		for _, w := range want {
			i := slices.IndexFunc(got, func(r metav1.OwnerReference) bool { return r.UID == w.UID })
			if i < 0 || !equality.Semantic.DeepEqual(got[i], w) {
				t.Fatalf("withOwners(%v, %v) = %v: %v is not there as wanted", have, want, got, w)
			}
		}
		wantsController := slices.ContainsFunc(want, isController)
		var kept []metav1.OwnerReference
		for _, h := range have {
			wanted := slices.ContainsFunc(want, func(w metav1.OwnerReference) bool { return w.UID == h.UID })
			replaced := wantsController && isController(h)
			if !wanted && !replaced {
				kept = append(kept, h)
			}
		}
		var others []metav1.OwnerReference
		for _, g := range got {
			if !slices.ContainsFunc(want, func(w metav1.OwnerReference) bool { return w.UID == g.UID }) {
				others = append(others, g)
			}
		}
		if !equality.Semantic.DeepEqual(others, kept) {
			t.Fatalf("withOwners(%v, %v) = %v: the others' are %v, want %v", have, want, got, others, kept)
		}
		if n := len(slices.DeleteFunc(slices.Clone(got), func(r metav1.OwnerReference) bool { return !isController(r) })); n > 1 {
			t.Fatalf("withOwners(%v, %v) = %v: %d controllers", have, want, got, n)
		}
		if again := withOwners(got, want); !equality.Semantic.DeepEqual(again, got) {
			t.Fatalf("laid over again, %v became %v", got, again)
		}
	})
}
