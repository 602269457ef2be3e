package managed

import (
	"context"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// TestCleanup checks the CSR lifetimes: decided or issued CSRs go after an
// hour, pending ones after a day, and others' signers are left alone.
func TestCleanup(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	approved := []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved}}
	tests := []struct {
		name        string
		signer      string
		age         time.Duration
		conditions  []certificatesv1.CertificateSigningRequestCondition
		certificate []byte
		wantDeleted bool
		wantRequeue time.Duration
	}{
		{"issued, 61 minutes old", certificatesv1.KubeAPIServerClientKubeletSignerName, 61 * time.Minute, approved, []byte("cert"), true, 0},
		{"issued, 10 minutes old", certificatesv1.KubeAPIServerClientKubeletSignerName, 10 * time.Minute, approved, []byte("cert"), false, 50 * time.Minute},
		{"denied, 2 hours old", certificatesv1.KubeletServingSignerName, 2 * time.Hour,
			[]certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied}}, nil, true, 0},
		{"pending, 25 hours old", certificatesv1.KubeAPIServerClientKubeletSignerName, 25 * time.Hour, nil, nil, true, 0},
		{"another signer, 3 days old", "example.com/signer", 72 * time.Hour, approved, []byte("cert"), false, 0},
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			csr := &certificatesv1.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: "csr", CreationTimestamp: metav1.NewTime(now.Add(-tt.age))},
				Spec:       certificatesv1.CertificateSigningRequestSpec{SignerName: tt.signer},
				Status:     certificatesv1.CertificateSigningRequestStatus{Conditions: tt.conditions, Certificate: tt.certificate},
			}
			remote := fake.NewClientBuilder().WithScheme(scheme).WithObjects(csr).WithStatusSubresource(csr).Build()
			r := &csrReconciler{cluster: client.ObjectKey{Namespace: "ns", Name: "gone"}, remote: remote,
				management: fake.NewClientBuilder().WithScheme(scheme).Build(), clock: clocktesting.NewFakeClock(now)}
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "csr"}})
			if err != nil {
				t.Fatal(err)
			}
			err = remote.Get(context.Background(), client.ObjectKey{Name: "csr"}, &certificatesv1.CertificateSigningRequest{})
			if deleted := apierrors.IsNotFound(err); deleted != tt.wantDeleted {
				t.Fatalf("deleted = %v, want %v", deleted, tt.wantDeleted)
			}
			if res.RequeueAfter != tt.wantRequeue {
				t.Fatalf("requeue after %s, want %s", res.RequeueAfter, tt.wantRequeue)
			}
		})
	}
}
