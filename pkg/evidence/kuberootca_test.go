package evidence

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/pki/pkitest"
)

func TestKubeRootCALag(t *testing.T) {
	old, current := pkitest.NewCA(t, "old"), pkitest.NewCA(t, "new")
	both := pki.NewBundle(old.Cert, current.Cert)
	namespace := func(name string, phase corev1.NamespacePhase) corev1.Namespace {
		return corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NamespaceStatus{Phase: phase}}
	}
	rootCA := func(ns string, data []byte) corev1.ConfigMap {
		return corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: KubeRootCAConfigMap}, Data: map[string]string{KubeRootCAKey: string(data)}}
	}
	active := []corev1.Namespace{namespace("default", corev1.NamespaceActive), namespace("kube-system", corev1.NamespaceActive)}
	tests := []struct {
		name       string
		want       pki.Bundle
		namespaces []corev1.Namespace
		published  []corev1.ConfigMap
		behind     []string
	}{
		{"both CAs everywhere, in either order", both, active,
			[]corev1.ConfigMap{rootCA("default", both.PEM()), rootCA("kube-system", pki.EncodeCertificates(current.Cert, old.Cert))}, nil},
		{"one namespace still on the old CA alone", both, active,
			[]corev1.ConfigMap{rootCA("default", old.CertPEM()), rootCA("kube-system", both.PEM())}, []string{"default"}},
		{"a namespace without one is behind", both, active, []corev1.ConfigMap{rootCA("kube-system", both.PEM())}, []string{"default"}},
		{"the old CA kept after the drop is behind", pki.NewBundle(current.Cert), active,
			[]corev1.ConfigMap{rootCA("default", current.CertPEM()), rootCA("kube-system", both.PEM())}, []string{"kube-system"}},
		{"only the new CA after the drop", pki.NewBundle(current.Cert), active,
			[]corev1.ConfigMap{rootCA("default", current.CertPEM()), rootCA("kube-system", current.CertPEM())}, nil},
		{"unparsable data is behind", both, active,
			[]corev1.ConfigMap{rootCA("default", []byte("not PEM")), rootCA("kube-system", both.PEM())}, []string{"default"}},
		{"a namespace being deleted is not waited for", both,
			append(slices.Clone(active), namespace("leaving", corev1.NamespaceTerminating)),
			[]corev1.ConfigMap{rootCA("default", both.PEM()), rootCA("kube-system", both.PEM())}, nil},
		{"another ConfigMap does not count", both, active[:1],
			[]corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other"}, Data: map[string]string{KubeRootCAKey: string(both.PEM())}}},
			[]string{"default"}},
		{"sorted", both, []corev1.Namespace{namespace("b", ""), namespace("a", "")}, nil, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := KubeRootCALag(tt.want, tt.namespaces, tt.published); !slices.Equal(got, tt.behind) {
				t.Fatalf("KubeRootCALag = %v, want %v", got, tt.behind)
			}
		})
	}
}
