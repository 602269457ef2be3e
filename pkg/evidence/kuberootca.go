package evidence

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/carousel-dev/carousel/pkg/bounded"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// KubeRootCAConfigMap is the ConfigMap kube-controller-manager's root-CA
// publisher keeps in every namespace, and its key: the bundle pods trust the
// API server with (mounted beside their service-account token).
const (
	KubeRootCAConfigMap = "kube-root-ca.crt"
	KubeRootCAKey       = "ca.crt"
)

// KubeRootCABehind lists, sorted, the namespaces of the managed cluster at
// endpoint whose kube-root-ca.crt is not exactly the certificates of want,
// or that have none. It reads as the client key pair, verifying the API
// server with serverTrust.
func (c Checker) KubeRootCABehind(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM, want []byte) ([]string, error) {
	cs, err := c.clientset(endpoint, serverTrust, certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	wantBundle, err := pki.ParseBundle(want)
	if err != nil {
		return nil, fmt.Errorf("the cluster CA bundle: %w", err)
	}
	// Only what KubeRootCALag reads is kept: the server may be a tenant's.
	var namespaces []corev1.Namespace
	if err := bounded.EachItem(ctx, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return cs.CoreV1().Namespaces().List(ctx, opts)
	}, func(ns *corev1.Namespace) {
		namespaces = append(namespaces, corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name, DeletionTimestamp: ns.DeletionTimestamp},
			Status: corev1.NamespaceStatus{Phase: ns.Status.Phase}})
	}); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var published []corev1.ConfigMap
	if err := bounded.EachItem(ctx, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		opts.FieldSelector = "metadata.name=" + KubeRootCAConfigMap
		return cs.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, opts)
	}, func(cm *corev1.ConfigMap) {
		bundle := cm.Data[KubeRootCAKey]
		if len(bundle) > maxKeptBundleBytes {
			bundle = "(larger than any bundle Carousel publishes)" // does not parse: behind
		}
		published = append(published, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name},
			Data: map[string]string{KubeRootCAKey: bundle}})
	}); err != nil {
		return nil, fmt.Errorf("listing %s: %w", KubeRootCAConfigMap, err)
	}
	return KubeRootCALag(wantBundle, namespaces, published), nil
}

// maxKeptBundleBytes is the most of a kube-root-ca.crt that the check keeps
// per namespace: a few CA certificates take a few KiB.
const maxKeptBundleBytes = 64 << 10

// KubeRootCALag lists, sorted, the namespaces not being deleted whose
// kube-root-ca.crt (among published) is missing, unparsable, or not the
// same set of certificates as want. The root-CA publisher leaves a
// namespace that is being deleted alone, and so does the check.
func KubeRootCALag(want pki.Bundle, namespaces []corev1.Namespace, published []corev1.ConfigMap) []string {
	byNamespace := make(map[string]string, len(published))
	for _, cm := range published {
		if cm.Name == KubeRootCAConfigMap {
			byNamespace[cm.Namespace] = cm.Data[KubeRootCAKey]
		}
	}
	var behind []string
	for _, ns := range namespaces {
		if ns.Status.Phase == corev1.NamespaceTerminating || !ns.DeletionTimestamp.IsZero() {
			continue
		}
		data, ok := byNamespace[ns.Name]
		if !ok || !sameCertificates(data, want) {
			behind = append(behind, ns.Name)
		}
	}
	slices.Sort(behind)
	return behind
}

// sameCertificates reports whether data holds exactly the certificates of
// want, in any order.
func sameCertificates(data string, want pki.Bundle) bool {
	got, err := pki.ParseBundle([]byte(data))
	return err == nil && sameBundle(got, want)
}

// sameBundle reports whether got holds exactly the certificates of want, in
// any order.
func sameBundle(got, want pki.Bundle) bool {
	if len(got) != len(want) {
		return false
	}
	for _, cert := range want {
		if !got.Contains(cert) {
			return false
		}
	}
	return true
}
