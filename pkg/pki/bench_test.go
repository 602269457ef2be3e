package pki

import (
	"crypto/x509"
	"testing"
	"time"
)

func BenchmarkGenerateKey(b *testing.B) {
	for _, alg := range KeyAlgorithms() {
		b.Run(string(alg), func(b *testing.B) {
			for b.Loop() {
				if _, err := GenerateKey(alg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIssue measures signing one client+server leaf certificate with a
// CA whose key is of the given algorithm (the leaf key is pre-generated).
func BenchmarkIssue(b *testing.B) {
	tmpl := LeafTemplate{
		CommonName: "kube-apiserver",
		DNSNames:   []string{"kubernetes", "kubernetes.default.svc"},
		Usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		Validity:   time.Hour,
	}
	leafKey := testKey(b, ECDSAP256).Public()
	for _, alg := range KeyAlgorithms() {
		b.Run(string(alg), func(b *testing.B) {
			ca := testCA(b, alg, 24*time.Hour)
			for b.Loop() {
				if _, err := ca.Issue(tmpl, leafKey, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
