package nodeagent

import (
	"context"
	"crypto/x509"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	certificatesv1client "k8s.io/client-go/kubernetes/typed/certificates/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// fakeSigner is an API server that only serves CSRs, and answers each at
// once: it keeps them by name (a second Create of a name is AlreadyExists)
// and lets answer decide every new one. Other API calls panic.
type fakeSigner struct {
	kubernetes.Interface

	// answer sets the status of the n-th created CSR (from 0); approve
	// issues it.
	answer func(n int, csr *certificatesv1.CertificateSigningRequest)
	// refuses, when set, says which clients a SelfSubjectReview refuses.
	refuses func(*rest.Config) bool

	mu      sync.Mutex
	csrs    map[string]*certificatesv1.CertificateSigningRequest
	created []*certificatesv1.CertificateSigningRequest
}

func newFakeSigner(answer func(n int, csr *certificatesv1.CertificateSigningRequest)) *fakeSigner {
	return &fakeSigner{answer: answer, csrs: map[string]*certificatesv1.CertificateSigningRequest{}}
}

// client is a Manager.newClient that always returns the fake, which
// reviews the client as cfg makes it.
func (f *fakeSigner) client(cfg *rest.Config) (kubernetes.Interface, error) {
	return fakeClient{fakeSigner: f, cfg: cfg}, nil
}

// fakeClient is the fakeSigner as a client made with cfg sees it.
type fakeClient struct {
	*fakeSigner
	cfg *rest.Config
}

// AuthenticationV1 serves SelfSubjectReviews: they succeed, unless refuses
// says the API server refuses the client's credentials.
func (c fakeClient) AuthenticationV1() authenticationv1client.AuthenticationV1Interface {
	if c.refuses != nil && c.refuses(c.cfg) {
		return fakeAuthentication{err: apierrors.NewUnauthorized("Unauthorized")}
	}
	return fakeAuthentication{}
}

// refusingReviews is a client whose SelfSubjectReviews fail with err,
// Unauthorized when nil: the API server refuses its credentials.
type refusingReviews struct {
	kubernetes.Interface
	err error
}

func (r refusingReviews) AuthenticationV1() authenticationv1client.AuthenticationV1Interface {
	if r.err == nil {
		return fakeAuthentication{err: apierrors.NewUnauthorized("Unauthorized")}
	}
	return fakeAuthentication{err: r.err}
}

// fakeAuthentication answers SelfSubjectReviews with err, or the review.
type fakeAuthentication struct {
	authenticationv1client.AuthenticationV1Interface
	err error
}

func (a fakeAuthentication) SelfSubjectReviews() authenticationv1client.SelfSubjectReviewInterface {
	return fakeSelfSubjectReviews(a)
}

type fakeSelfSubjectReviews struct {
	authenticationv1client.AuthenticationV1Interface
	err error
}

func (r fakeSelfSubjectReviews) Create(_ context.Context, review *authenticationv1.SelfSubjectReview, _ metav1.CreateOptions) (*authenticationv1.SelfSubjectReview, error) {
	if r.err != nil {
		return nil, r.err
	}
	return review, nil
}

// Created returns the CSRs created so far.
func (f *fakeSigner) Created() []*certificatesv1.CertificateSigningRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*certificatesv1.CertificateSigningRequest(nil), f.created...)
}

func (f *fakeSigner) CertificatesV1() certificatesv1client.CertificatesV1Interface {
	return fakeCertificatesV1{f: f}
}

type fakeCertificatesV1 struct {
	certificatesv1client.CertificatesV1Interface
	f *fakeSigner
}

func (c fakeCertificatesV1) CertificateSigningRequests() certificatesv1client.CertificateSigningRequestInterface {
	return fakeCSRs{f: c.f}
}

type fakeCSRs struct {
	certificatesv1client.CertificateSigningRequestInterface
	f *fakeSigner
}

var csrResource = schema.GroupResource{Group: certificatesv1.GroupName, Resource: "certificatesigningrequests"}

func (c fakeCSRs) Create(_ context.Context, csr *certificatesv1.CertificateSigningRequest, _ metav1.CreateOptions) (*certificatesv1.CertificateSigningRequest, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.csrs[csr.Name]; ok {
		return nil, apierrors.NewAlreadyExists(csrResource, csr.Name)
	}
	csr = csr.DeepCopy()
	f.answer(len(f.created), csr)
	f.csrs[csr.Name] = csr
	f.created = append(f.created, csr)
	return csr.DeepCopy(), nil
}

func (c fakeCSRs) Get(_ context.Context, name string, _ metav1.GetOptions) (*certificatesv1.CertificateSigningRequest, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	csr, ok := f.csrs[name]
	if !ok {
		return nil, apierrors.NewNotFound(csrResource, name)
	}
	return csr.DeepCopy(), nil
}

// approve issues csr with testCA, valid from now-pki.Backdate for validity.
// It may run on the goroutine under test, so it reports with t.Error.
func approve(t *testing.T, csr *certificatesv1.CertificateSigningRequest, validity time.Duration, now time.Time) {
	t.Helper()
	sign(t, csr, testCA, x509.ExtKeyUsageClientAuth, validity, now)
}

// sign approves csr and signs it with ca for usage and the SANs it asks for.
func sign(t *testing.T, csr *certificatesv1.CertificateSigningRequest, ca *pki.KeyPair, usage x509.ExtKeyUsage, validity time.Duration, now time.Time) {
	t.Helper()
	req, err := parseCSR(csr)
	if err != nil {
		t.Error(err)
		return
	}
	signAs(t, csr, ca, pki.LeafTemplate{CommonName: req.Subject.CommonName, Organization: req.Subject.Organization,
		DNSNames: req.DNSNames, IPAddresses: req.IPAddresses, Usages: []x509.ExtKeyUsage{usage}, Validity: validity}, now)
}

// signAs approves csr and signs its key with ca for template, whatever the
// CSR asks.
func signAs(t *testing.T, csr *certificatesv1.CertificateSigningRequest, ca *pki.KeyPair, template pki.LeafTemplate, now time.Time) {
	t.Helper()
	req, err := parseCSR(csr)
	if err != nil {
		t.Error(err)
		return
	}
	cert, err := ca.Issue(template, req.PublicKey, now)
	if err != nil {
		t.Error(err)
		return
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: "True", Reason: "Test"})
	csr.Status.Certificate = pki.EncodeCertificates(cert)
}

// refuse ends csr with a condition of type typ (Denied or Failed).
func refuse(csr *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType) {
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: "True", Reason: "Test", Message: "refused by the test"})
}

func parseCSR(csr *certificatesv1.CertificateSigningRequest) (*x509.CertificateRequest, error) {
	return pki.ParseCertificateRequest(csr.Spec.Request)
}

// awaitWaiters waits (in real time, for the goroutines under test) until at
// least n timers are waiting on clk. It counts every timer on clk, whoever
// set it: a test that counts on it to tell that the code under test waits
// starts from a clock nothing else waits on (awaitNoWaiters).
func awaitWaiters(t *testing.T, clk *clocktesting.FakeClock, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for clk.Waiters() < n {
		if time.Now().After(deadline) {
			t.Fatalf("nothing waits on the clock after 10s (%d waiters, want %d)", clk.Waiters(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// awaitNoWaiters waits (in real time) until no timer waits on clk, once
// whatever set them has returned. withClockTimeout's deadline timer (Start
// sets one) is stopped by its own goroutine after the call returns, not by
// the call: on a busy machine it is still on clk for a while, where
// awaitWaiters would count it.
func awaitNoWaiters(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for clk.Waiters() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers still wait on the clock after 10s, want none", clk.Waiters())
		}
		time.Sleep(time.Millisecond)
	}
}
