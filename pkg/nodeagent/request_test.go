package nodeagent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

func pendingCSR() *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "node-csr-1", UID: "uid-1", ResourceVersion: "5"}}
}

// An API server that restarted, or whose watch cache no longer holds the
// CSR's resource version, answers every watch from it with "too old": the
// wait lists the CSR again before it watches again, and sees the
// certificate that way.
func TestWaitingForACertificateListsAgainWhenTheWatchCannotResume(t *testing.T) {
	cs := fake.NewClientset(pendingCSR())
	var mu sync.Mutex
	var calls []string
	cs.PrependReactor("list", "certificatesigningrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, "list")
		return false, nil, nil
	})
	cs.PrependReactor("get", "certificatesigningrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, "get")
		return false, nil, nil
	})
	cs.PrependWatchReactor("certificatesigningrequests", func(k8stesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, "watch")
		w := watch.NewFakeWithChanSize(1, false)
		w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
		w.Stop()
		return true, w, nil
	})
	watches := func() int {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(strings.Join(calls, " "), "watch")
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type result struct {
		cert []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		cert, err := WaitForCertificate(ctx, cs, pendingCSR())
		done <- result{cert, err}
	}()
	for watches() < 1 {
		select {
		case r := <-done:
			t.Fatalf("returned before any watch: %q, %v", r.cert, r.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	signed := pendingCSR()
	signed.Status.Certificate = []byte("the certificate")
	if err := cs.Tracker().Update(certificatesv1.SchemeGroupVersion.WithResource("certificatesigningrequests"), signed, ""); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || string(r.cert) != "the certificate" {
		t.Fatalf("WaitForCertificate = %q, %v", r.cert, r.err)
	}
	mu.Lock()
	defer mu.Unlock()
	// Every watch follows a list of its own: none resumes from a resource
	// version the API server already called too old.
	all, resumed := 0, 0
	for i, call := range calls {
		if call == "watch" {
			all++
			if i == 0 || calls[i-1] != "list" {
				resumed++
			}
		}
	}
	if resumed > 0 {
		t.Errorf("%d of %d watches do not follow a list (calls: %q...)", resumed, all, calls[:min(len(calls), 8)])
	}
}

func TestWaitingForACertificateOfACSRGoneOrReplacedEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err := WaitForCertificate(ctx, fake.NewClientset(), pendingCSR())
	if err == nil || !strings.Contains(err.Error(), "CSR node-csr-1 was deleted before it was signed") {
		t.Errorf("deleted: err = %v", err)
	}

	other := pendingCSR()
	other.UID = "uid-2"
	_, err = WaitForCertificate(ctx, fake.NewClientset(other), pendingCSR())
	if err == nil || !strings.Contains(err.Error(), "replaced by another of that name") {
		t.Errorf("replaced: err = %v", err)
	}

	denied := pendingCSR()
	refuse(denied, certificatesv1.CertificateDenied)
	if _, err := WaitForCertificate(ctx, fake.NewClientset(), denied); !errors.Is(err, ErrDenied) {
		t.Errorf("denied: err = %v", err)
	}

	expired, cancelExpired := context.WithCancel(ctx)
	cancelExpired()
	if _, err := WaitForCertificate(expired, fake.NewClientset(pendingCSR()), pendingCSR()); !errors.Is(err, context.Canceled) ||
		!strings.Contains(err.Error(), "waiting for CSR node-csr-1 to be approved and signed") {
		t.Errorf("canceled: err = %v", err)
	}
}

// A list served from the API server's watch cache may not hold a CSR just
// created: the wait goes on unless a read of the latest finds it gone.
func TestACSRMissingFromTheFirstListIsGoneOnlyIfTheAPIServerSaysSo(t *testing.T) {
	gone := errors.New("gone")
	empty := cache.NewStore(cache.MetaNamespaceKeyFunc)
	api := fake.NewClientset(pendingCSR()).CertificatesV1().CertificateSigningRequests()
	if done, err := stillThere(context.Background(), api, "node-csr-1", gone)(empty); done || err != nil {
		t.Errorf("a CSR the API server has: %v, %v; want the wait to go on", done, err)
	}
	api = fake.NewClientset().CertificatesV1().CertificateSigningRequests()
	if done, err := stillThere(context.Background(), api, "node-csr-1", gone)(empty); done || !errors.Is(err, gone) {
		t.Errorf("a CSR the API server has not: %v, %v; want it gone", done, err)
	}
}

// TestOutcome: a request denied, or failed, is answered with an error; one
// with a Failed condition that is False or Unknown has not failed (the
// signer signs it), and is answered only by its certificate.
func TestOutcome(t *testing.T) {
	cond := func(typ certificatesv1.RequestConditionType, status corev1.ConditionStatus) certificatesv1.CertificateSigningRequestCondition {
		return certificatesv1.CertificateSigningRequestCondition{Type: typ, Status: status}
	}
	approved := cond(certificatesv1.CertificateApproved, corev1.ConditionTrue)
	for _, tc := range []struct {
		name       string
		conditions []certificatesv1.CertificateSigningRequestCondition
		cert       []byte
		wantDone   bool
		wantErr    error
	}{
		{"pending", nil, nil, false, nil},
		{"approved, not signed yet", []certificatesv1.CertificateSigningRequestCondition{approved}, nil, false, nil},
		{"signed", []certificatesv1.CertificateSigningRequestCondition{approved}, []byte("cert"), true, nil},
		{"denied", []certificatesv1.CertificateSigningRequestCondition{cond(certificatesv1.CertificateDenied, corev1.ConditionTrue)}, nil, true, ErrDenied},
		{"failed", []certificatesv1.CertificateSigningRequestCondition{approved, cond(certificatesv1.CertificateFailed, corev1.ConditionTrue)}, nil, true, ErrFailed},
		{"approved, Failed False", []certificatesv1.CertificateSigningRequestCondition{approved, cond(certificatesv1.CertificateFailed, corev1.ConditionFalse)}, nil, false, nil},
		{"approved, Failed Unknown, then signed", []certificatesv1.CertificateSigningRequestCondition{approved, cond(certificatesv1.CertificateFailed, corev1.ConditionUnknown)},
			[]byte("cert"), true, nil},
	} {
		req := &certificatesv1.CertificateSigningRequest{Status: certificatesv1.CertificateSigningRequestStatus{Conditions: tc.conditions, Certificate: tc.cert}}
		_, done, err := outcome(req)
		if done != tc.wantDone || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
			t.Errorf("%s: outcome = done %t, %v; want done %t, %v", tc.name, done, err, tc.wantDone, tc.wantErr)
		}
	}
}
