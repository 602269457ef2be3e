package cluster

import (
	"bytes"
	"crypto/sha256"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// derivedKeys are the data of a leaf certificate Secret that the reconciler
// renders from what it holds elsewhere: the peer's trust bundle (also in the
// role's bundle ConfigMap) and the kubeconfig (the cluster bundle, the
// certificate and its key). They are half of a fleet's cached Secret data,
// and the reconciler only ever compares them with what it rendered.
var derivedKeys = [...]string{v1alpha1.DataKeyCABundle, v1alpha1.DataKeyKubeconfig}

// digestMarker starts a derived value the cache holds as its SHA-256. The NUL
// byte keeps it apart from anything the reconciler renders (PEM and YAML).
const digestMarker = "\x00sha256:"

var stripManagedFields = cache.TransformStripManagedFields()

// cacheSecret is the cache's transform of Secrets: it drops managedFields, as
// for every cached object, and keeps each derived value of a leaf
// certificate Secret as its digest. It always digests what the API server
// sent, whatever that looks like, so no value written to the Secret can pass
// for the digest of another; applied twice (which informers do not do), a
// value compares unequal and is written once more.
func cacheSecret(obj any) (any, error) {
	obj, err := stripManagedFields(obj)
	if err != nil {
		return obj, err
	}
	if s, ok := obj.(*corev1.Secret); ok && s.Labels[v1alpha1.LabelCertificate] != "" {
		for _, k := range derivedKeys {
			if v, ok := s.Data[k]; ok {
				s.Data[k] = digestOf(v)
			}
		}
	}
	return obj, nil
}

func digestOf(v []byte) []byte {
	sum := sha256.Sum256(v)
	return append([]byte(digestMarker), sum[:]...)
}

// sameValue reports whether a Secret's value as read, which the cache may
// hold as its digest, is want.
func sameValue(have, want []byte) bool {
	if digest, ok := bytes.CutPrefix(have, []byte(digestMarker)); ok && len(digest) == sha256.Size {
		sum := sha256.Sum256(want)
		return bytes.Equal(digest, sum[:])
	}
	return bytes.Equal(have, want)
}
