package cluster

import (
	"bytes"
	"crypto/sha256"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

// derivedKeys are the data of a leaf certificate Secret that the reconciler
// renders from what it holds elsewhere: the peer's trust bundle (also in the
// role's bundle ConfigMap) and the kubeconfig (the cluster bundle, the
// certificate and its key). They are half of a fleet's cached Secret data,
// and the reconciler only ever compares them with what it rendered.
// Each has the key under which the cache holds its SHA-256 instead of the
// value. The API server never sends such a key (a data key has no ':'), so no
// one who writes the Secret can set one, and the transform knows a value it
// has already digested.
var derivedKeys = map[string]string{
	v1alpha1.DataKeyCABundle:   "sha256:" + v1alpha1.DataKeyCABundle,
	v1alpha1.DataKeyKubeconfig: "sha256:" + v1alpha1.DataKeyKubeconfig,
}

var stripManagedFields = cache.TransformStripManagedFields()

// cacheSecret is the cache's transform of Secrets: it drops managedFields, as
// for every cached object, and keeps each derived value of a leaf
// certificate Secret as its digest (derivedKeys). It is idempotent, as an
// informer's transform must be: a watch-list sync applies it twice.
func cacheSecret(obj any) (any, error) {
	obj, err := stripManagedFields(obj)
	if err != nil {
		return obj, err
	}
	s, ok := obj.(*corev1.Secret)
	if !ok || !isLeafCertificateSecret(s) {
		return obj, nil
	}
	for k, digestKey := range derivedKeys {
		if v, ok := s.Data[k]; ok {
			sum := sha256.Sum256(v)
			s.Data[digestKey] = sum[:]
			delete(s.Data, k)
		}
	}
	return obj, nil
}

// cacheConfigMap is the cache's transform of ConfigMaps: it drops
// managedFields, as for every cached object, and the data of the Cluster's
// records of package oldca (credentials.IsRecord). A record grows with the
// clients of the managed cluster (the usage record up to
// oldca.MaxUsageBytes), the gate reads it only while a rotation is Prepared
// (or an abort keeps the new client CA), and the audit receiver, which
// writes the usage record, reads it when a batch may change it: both read
// it from the API server. The cache keeps its metadata, so that a write still queues the
// Cluster. Idempotent, as cacheSecret.
func cacheConfigMap(obj any) (any, error) {
	obj, err := stripManagedFields(obj)
	if err != nil {
		return obj, err
	}
	if cm, ok := obj.(*corev1.ConfigMap); ok && credentials.IsRecord(cm.Labels[v1alpha1.LabelCluster], cm.Name) {
		cm.Data, cm.BinaryData = nil, nil
	}
	return obj, nil
}

// isLeafCertificateSecret reports whether s is named and labelled as the
// Secret of one of a Cluster's leaf certificates.
func isLeafCertificateSecret(s *corev1.Secret) bool {
	cluster, cert := s.Labels[v1alpha1.LabelCluster], s.Labels[v1alpha1.LabelCertificate]
	return cluster != "" && cert != "" && s.Name == credentials.CertificateSecretName(cluster, cert)
}

// sameData reports whether a Secret's data as read, which the cache may hold
// digested (cacheSecret), is want.
func sameData(have, want map[string][]byte) bool {
	if len(have) != len(want) {
		return false
	}
	for k, v := range want {
		if got, ok := have[k]; ok {
			if !bytes.Equal(got, v) {
				return false
			}
			continue
		}
		digest, ok := have[derivedKeys[k]]
		if sum := sha256.Sum256(v); !ok || !bytes.Equal(digest, sum[:]) {
			return false
		}
	}
	return true
}
