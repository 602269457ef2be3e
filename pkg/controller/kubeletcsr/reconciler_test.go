package kubeletcsr

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/credentials"
	csrlib "github.com/carousel-dev/carousel/pkg/csr"
	"github.com/carousel-dev/carousel/pkg/pki"
)

var testNow = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

func conditionAt(typ certificatesv1.RequestConditionType, at time.Time) certificatesv1.CertificateSigningRequestCondition {
	return certificatesv1.CertificateSigningRequestCondition{Type: typ, Status: corev1.ConditionTrue, Reason: "Test",
		LastUpdateTime: metav1.NewTime(at), LastTransitionTime: metav1.NewTime(at)}
}

// TestCleanup checks the CSR lifetimes: decided or issued CSRs go an hour
// after their decision, pending ones a day after their creation, and
// others' signers are left alone.
func TestCleanup(t *testing.T) {
	now := testNow
	approved := func(ago time.Duration) []certificatesv1.CertificateSigningRequestCondition {
		return []certificatesv1.CertificateSigningRequestCondition{conditionAt(certificatesv1.CertificateApproved, now.Add(-ago))}
	}
	tests := []struct {
		name        string
		signer      string
		age         time.Duration
		conditions  []certificatesv1.CertificateSigningRequestCondition
		certificate []byte
		wantDeleted bool
		wantRequeue time.Duration
	}{
		{"issued, approved 61 minutes ago", certificatesv1.KubeAPIServerClientKubeletSignerName, 61 * time.Minute, approved(61 * time.Minute), []byte("cert"), true, 0},
		{"issued, approved 10 minutes ago", certificatesv1.KubeAPIServerClientKubeletSignerName, 10 * time.Minute, approved(10 * time.Minute), []byte("cert"), false, 50 * time.Minute},
		{"issued, created 2 hours ago but approved 10 minutes ago", certificatesv1.KubeletServingSignerName, 2 * time.Hour, approved(10 * time.Minute), []byte("cert"), false, 50 * time.Minute},
		{"denied 2 hours ago", certificatesv1.KubeletServingSignerName, 3 * time.Hour,
			[]certificatesv1.CertificateSigningRequestCondition{conditionAt(certificatesv1.CertificateDenied, now.Add(-2*time.Hour))}, nil, true, 0},
		{"created 3 hours ago, denied 20 minutes ago", certificatesv1.KubeletServingSignerName, 3 * time.Hour,
			[]certificatesv1.CertificateSigningRequestCondition{conditionAt(certificatesv1.CertificateDenied, now.Add(-20*time.Minute))}, nil, false, 40 * time.Minute},
		{"pending, 25 hours old", certificatesv1.KubeAPIServerClientKubeletSignerName, 25 * time.Hour, nil, nil, true, 0},
		{"another signer, 3 days old", "example.com/signer", 72 * time.Hour, approved(72 * time.Hour), []byte("cert"), false, 0},
	}
	scheme := testScheme(t)
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

// TestCleanupLeavesARequestApprovedAtTheLastMoment checks that the cleanup
// deletes only the request it looked at: a pending request past its day,
// approved between the reconciler's read and its delete, stays (it is
// issued next, and goes an hour after its approval).
func TestCleanupLeavesARequestApprovedAtTheLastMoment(t *testing.T) {
	now := testNow
	scheme := testScheme(t)
	pending := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr", UID: "uid-1", CreationTimestamp: metav1.NewTime(now.Add(-25 * time.Hour))},
		Spec:       certificatesv1.CertificateSigningRequestSpec{SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName},
	}
	store := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pending).WithStatusSubresource(pending).Build()
	approvedMeanwhile := false
	remote := interceptor.NewClient(store, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil || approvedMeanwhile {
				return err
			}
			// Another approver acts once the reconciler has read the request.
			approved := obj.DeepCopyObject().(*certificatesv1.CertificateSigningRequest)
			approved.Status.Conditions = append(approved.Status.Conditions, conditionAt(certificatesv1.CertificateApproved, now))
			approvedMeanwhile = true
			return c.Status().Update(ctx, approved)
		},
	})
	r := &csrReconciler{cluster: client.ObjectKey{Namespace: "ns", Name: "gone"}, remote: remote,
		management: fake.NewClientBuilder().WithScheme(scheme).Build(), clock: clocktesting.NewFakeClock(now)}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "csr"}}); err != nil {
		t.Fatal(err)
	}
	if !approvedMeanwhile {
		t.Fatal("the request was not approved during the reconcile")
	}
	got := &certificatesv1.CertificateSigningRequest{}
	if err := store.Get(context.Background(), client.ObjectKey{Name: "csr"}, got); err != nil {
		t.Fatalf("the request approved at the last moment is gone: %v", err)
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != certificatesv1.CertificateApproved {
		t.Fatalf("conditions %v, want the approval", got.Status.Conditions)
	}
}

// fixture is a managed cluster (remote) and a management cluster with a
// Cluster, its client and kubelet CAs and the leaf certificates that say
// which CA signs, as the CSR controller finds them.
type fixture struct {
	scheme     *runtime.Scheme
	clock      *clocktesting.FakeClock
	cluster    *v1alpha1.Cluster
	clientCA   *pki.KeyPair
	kubeletCA  *pki.KeyPair
	management []client.Object
	remote     []client.Object
	// remoteFuncs, when set, intercept the managed cluster's client.
	remoteFuncs *interceptor.Funcs
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{scheme: testScheme(t), clock: clocktesting.NewFakeClock(testNow)}
	f.cluster = &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "prod"}}
	f.cluster.Spec.KubeletBootstrap.CSRApproval = v1alpha1.CSRApprovalPolicy{Client: v1alpha1.ApprovalAuto, Serving: v1alpha1.ApprovalAuto}
	f.management = append(f.management, f.cluster)
	for _, ca := range []struct {
		role v1alpha1.CARole
		leaf string
		kp   **pki.KeyPair
	}{
		{v1alpha1.CARoleClient, credentials.CertOperator, &f.clientCA},
		{v1alpha1.CARoleKubelet, credentials.CertKubeAPIServerKubelet, &f.kubeletCA},
	} {
		kp, err := pki.NewCA(pki.CATemplate{CommonName: string(ca.role) + "-ca", Validity: 48 * time.Hour}, testKey(t), testNow.Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		*ca.kp = kp
		data, err := credentials.EncodeCASecretData(&credentials.CAs{Current: kp})
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := kp.IssueKeyPair(pki.LeafTemplate{CommonName: ca.leaf, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Hour},
			pki.ECDSAP256, testNow.Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		f.management = append(f.management,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.cluster.Namespace, Name: credentials.CASecretName(f.cluster.Name, ca.role)}, Data: data},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.cluster.Namespace, Name: credentials.CertificateSecretName(f.cluster.Name, ca.leaf)},
				Data: map[string][]byte{v1alpha1.DataKeyCertificate: leaf.CertPEM()}})
	}
	return f
}

func testKey(t *testing.T) crypto.Signer {
	t.Helper()
	k, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// kubeletCSR is a well-formed CSR of a kubelet signer for node worker-1,
// requested by the node itself and created at created, with DNS and IP SANs.
func kubeletCSR(t *testing.T, name, signer string, key crypto.Signer, created time.Time, sans ...string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:worker-1", Organization: []string{"system:nodes"}}}
	for _, san := range sans {
		if ip := net.ParseIP(san); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, san)
		}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	if signer == certificatesv1.KubeletServingSignerName {
		usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID("uid-" + name), CreationTimestamp: metav1.NewTime(created)},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: pki.EncodeCertificateRequest(der), SignerName: signer,
			Username: "system:node:worker-1", Groups: []string{"system:nodes", "system:authenticated"}, Usages: usages,
		},
	}
}

// build returns the reconciler and the managed cluster's client; funcs, when
// set, intercept the management cluster's client.
func (f *fixture) build(funcs *interceptor.Funcs) (*csrReconciler, client.Client) {
	rb := fake.NewClientBuilder().WithScheme(f.scheme).WithObjects(f.remote...).
		WithStatusSubresource(&certificatesv1.CertificateSigningRequest{})
	if f.remoteFuncs != nil {
		rb = rb.WithInterceptorFuncs(*f.remoteFuncs)
	}
	remote := rb.Build()
	mb := fake.NewClientBuilder().WithScheme(f.scheme).WithObjects(f.management...)
	if funcs != nil {
		mb = mb.WithInterceptorFuncs(*funcs)
	}
	return &csrReconciler{cluster: client.ObjectKeyFromObject(f.cluster), remote: remote, management: mb.Build(),
		clock: f.clock, maxDuration: 24 * time.Hour}, remote
}

func reconcileCSR(t *testing.T, r *csrReconciler, name string) (ctrl.Result, error) {
	t.Helper()
	return r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: name}})
}

func getCSR(t *testing.T, c client.Client, name string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	obj := &certificatesv1.CertificateSigningRequest{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, obj); err != nil {
		t.Fatalf("CSR %s: %v", name, err)
	}
	return obj
}

func hasCondition(obj *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType) (certificatesv1.CertificateSigningRequestCondition, bool) {
	for _, c := range obj.Status.Conditions {
		if c.Type == typ {
			return c, true
		}
	}
	return certificatesv1.CertificateSigningRequestCondition{}, false
}

// TestLateApprovalIsSigned: a CSR approved long after its creation (by an
// administrator the next morning, or while Carousel was down) is signed, not
// deleted, and then kept for an hour after its signing.
func TestLateApprovalIsSigned(t *testing.T) {
	tests := []struct {
		name       string
		signer     string
		created    time.Duration // ago
		approved   time.Duration // ago
		wantExpiry time.Duration // from now, after signing
	}{
		{"serving CSR approved by an administrator 20 hours after its creation", certificatesv1.KubeletServingSignerName, 20 * time.Hour, time.Minute, 59 * time.Minute},
		{"client CSR approved 3 hours ago, during an outage of Carousel", certificatesv1.KubeAPIServerClientKubeletSignerName, 4 * time.Hour, 3 * time.Hour, time.Hour - pki.Backdate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			obj := kubeletCSR(t, "late", tt.signer, testKey(t), testNow.Add(-tt.created), "worker-1")
			if tt.signer == certificatesv1.KubeAPIServerClientKubeletSignerName {
				obj = kubeletCSR(t, "late", tt.signer, testKey(t), testNow.Add(-tt.created))
			}
			obj.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{conditionAt(certificatesv1.CertificateApproved, testNow.Add(-tt.approved))}
			f.remote = append(f.remote, obj)
			r, remote := f.build(nil)
			if _, err := reconcileCSR(t, r, "late"); err != nil {
				t.Fatal(err)
			}
			signed := getCSR(t, remote, "late")
			if len(signed.Status.Certificate) == 0 {
				t.Fatalf("not signed: %+v", signed.Status)
			}
			// The signing's update event brings it back: it is kept.
			res, err := reconcileCSR(t, r, "late")
			if err != nil {
				t.Fatal(err)
			}
			getCSR(t, remote, "late")
			if res.RequeueAfter != tt.wantExpiry {
				t.Fatalf("deleted in %s, want %s", res.RequeueAfter, tt.wantExpiry)
			}
		})
	}
}

// TestTransientSigningErrorIsRetried: when the CA cannot be read from the
// management cluster, the CSR is not marked Failed; the error is returned,
// so that controller-runtime retries with backoff, and the request is signed
// once the CA can be read.
func TestTransientSigningErrorIsRetried(t *testing.T) {
	timeout := apierrors.NewTimeoutError("the server was unable to return a response in the time allotted", 1)
	notSynced := apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "prod-ca-client")
	unavailable := apierrors.NewServiceUnavailable("etcd leader changed")
	for _, failure := range []error{timeout, notSynced, unavailable} {
		t.Run(failure.Error(), func(t *testing.T) {
			f := newFixture(t)
			obj := kubeletCSR(t, "c", certificatesv1.KubeAPIServerClientKubeletSignerName, testKey(t), testNow.Add(-time.Minute))
			obj.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{conditionAt(certificatesv1.CertificateApproved, testNow)}
			f.remote = append(f.remote, obj)
			failing := true
			r, remote := f.build(&interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, isSecret := obj.(*corev1.Secret); isSecret && failing {
					return failure
				}
				return c.Get(ctx, key, obj, opts...)
			}})
			_, err := reconcileCSR(t, r, "c")
			if !errors.Is(err, failure) {
				t.Fatalf("Reconcile = %v, want the error returned for a retry", err)
			}
			if c, failed := hasCondition(getCSR(t, remote, "c"), certificatesv1.CertificateFailed); failed {
				t.Fatalf("marked Failed for good on a transient error: %s", c.Message)
			}
			failing = false
			if _, err := reconcileCSR(t, r, "c"); err != nil {
				t.Fatal(err)
			}
			if len(getCSR(t, remote, "c").Status.Certificate) == 0 {
				t.Fatal("not signed once the CA could be read")
			}
		})
	}
}

// TestRefusedRequestFails: a request the signer refuses is marked Failed for
// good, with a message that names the request's problem and nothing of the
// management cluster.
func TestRefusedRequestFails(t *testing.T) {
	f := newFixture(t)
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	obj := kubeletCSR(t, "ed", certificatesv1.KubeAPIServerClientKubeletSignerName, edKey, testNow.Add(-time.Minute))
	obj.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{conditionAt(certificatesv1.CertificateApproved, testNow)}
	// Another writer's Failed condition that is False (no failure): the API
	// server takes no second Failed condition, so it is replaced.
	notFailed := conditionAt(certificatesv1.CertificateFailed, testNow)
	notFailed.Status = corev1.ConditionFalse
	obj.Status.Conditions = append(obj.Status.Conditions, notFailed)
	f.remote = append(f.remote, obj)
	r, remote := f.build(nil)
	if _, err := reconcileCSR(t, r, "ed"); err != nil {
		t.Fatal(err)
	}
	got := getCSR(t, remote, "ed")
	c, failed := hasCondition(got, certificatesv1.CertificateFailed)
	if !failed || c.Status != corev1.ConditionTrue || c.Reason != "CarouselSigningFailed" || !strings.Contains(c.Message, "CarouselUnsupportedKey") {
		t.Fatalf("Failed condition %+v", c)
	}
	if n := len(got.Status.Conditions); n != 2 {
		t.Fatalf("%d conditions %+v, want Approved and one Failed", n, got.Status.Conditions)
	}
	for _, secret := range []string{f.cluster.Namespace, credentials.CASecretName(f.cluster.Name, v1alpha1.CARoleClient), "secret"} {
		if strings.Contains(c.Message, secret) {
			t.Fatalf("the message written into the managed cluster names %q: %s", secret, c.Message)
		}
	}
}

// managementNames are the names of the management cluster's objects that a
// condition written into the managed cluster must never carry: the
// Cluster's namespace and the Secrets the signer reads.
func (f *fixture) managementNames() []string {
	names := []string{f.cluster.Namespace}
	for _, o := range f.management {
		if _, secret := o.(*corev1.Secret); secret {
			names = append(names, o.GetName())
		}
	}
	return names
}

// TestBrokenManagementObjectIsRetried: when signing fails because an object
// of the management cluster is broken (the CA Secret or the Secret of the
// certificate that says which CA signs is missing or cannot be parsed), the
// CSR is not marked Failed and no condition written into the managed
// cluster names the management cluster's namespace or Secrets: the error is
// returned for a retry with backoff, and the request is signed once the
// object is repaired.
func TestBrokenManagementObjectIsRetried(t *testing.T) {
	for _, signer := range []string{certificatesv1.KubeAPIServerClientKubeletSignerName, certificatesv1.KubeletServingSignerName} {
		// Both signers follow Carousel's own client certificate; serving
		// certificates are signed by a kubelet CA.
		role, leaf := v1alpha1.CARoleClient, credentials.CertOperator
		if signer == certificatesv1.KubeletServingSignerName {
			role = v1alpha1.CARoleKubelet
		}
		for _, tt := range []struct {
			name    string
			secret  func(cluster string) string
			missing bool
			data    map[string][]byte // the corrupt data, unless missing
		}{
			{"CA Secret missing", func(c string) string { return credentials.CASecretName(c, role) }, true, nil},
			{"CA Secret unparsable", func(c string) string { return credentials.CASecretName(c, role) }, false,
				map[string][]byte{v1alpha1.DataKeyCertificate: []byte("not a certificate"), v1alpha1.DataKeyPrivateKey: []byte("not a key")}},
			{"CA Secret with half a previous CA", func(c string) string { return credentials.CASecretName(c, role) }, false, nil},
			{"signing-CA certificate Secret missing", func(c string) string { return credentials.CertificateSecretName(c, leaf) }, true, nil},
			{"signing-CA certificate Secret unparsable", func(c string) string { return credentials.CertificateSecretName(c, leaf) }, false,
				map[string][]byte{v1alpha1.DataKeyCertificate: []byte("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n")}},
		} {
			t.Run(signer+"/"+tt.name, func(t *testing.T) {
				f := newFixture(t)
				name := tt.secret(f.cluster.Name)
				var original *corev1.Secret
				kept := f.management[:0:0]
				for _, o := range f.management {
					if s, ok := o.(*corev1.Secret); ok && s.Name == name {
						original = s.DeepCopy()
						if tt.missing {
							continue
						}
						broken := s.DeepCopy()
						if tt.data != nil {
							broken.Data = tt.data
						} else {
							broken.Data[credentials.DataKeyPreviousCertificate] = s.Data[v1alpha1.DataKeyCertificate]
						}
						o = broken
					}
					kept = append(kept, o)
				}
				if original == nil {
					t.Fatalf("no Secret %s in the fixture", name)
				}
				names := f.managementNames()
				f.management = kept
				var sans []string
				if signer == certificatesv1.KubeletServingSignerName {
					sans = []string{"worker-1"}
				}
				obj := kubeletCSR(t, "c", signer, testKey(t), testNow.Add(-time.Minute), sans...)
				obj.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{conditionAt(certificatesv1.CertificateApproved, testNow)}
				f.remote = append(f.remote, obj)
				r, remote := f.build(nil)

				_, err := reconcileCSR(t, r, "c")
				got := getCSR(t, remote, "c")
				for _, c := range got.Status.Conditions {
					for _, n := range names {
						if strings.Contains(c.Reason, n) || strings.Contains(c.Message, n) {
							t.Fatalf("a %s condition written into the managed cluster names %q of the management cluster: %s: %s", c.Type, n, c.Reason, c.Message)
						}
					}
				}
				if c, failed := hasCondition(got, certificatesv1.CertificateFailed); failed {
					t.Fatalf("marked Failed for good for a broken object of the management cluster: %s", c.Message)
				}
				if len(got.Status.Conditions) != 1 || len(got.Status.Certificate) > 0 {
					t.Fatalf("status changed: %+v", got.Status)
				}
				if err == nil {
					t.Fatal("Reconcile returned no error: the request would not be retried")
				}

				// Repaired, the request is signed.
				mgmt := r.management.(client.Client)
				ctx := context.Background()
				if tt.missing {
					original.ResourceVersion = ""
					if err := mgmt.Create(ctx, original); err != nil {
						t.Fatal(err)
					}
				} else {
					s := &corev1.Secret{}
					if err := mgmt.Get(ctx, client.ObjectKeyFromObject(original), s); err != nil {
						t.Fatal(err)
					}
					s.Data = original.Data
					if err := mgmt.Update(ctx, s); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := reconcileCSR(t, r, "c"); err != nil {
					t.Fatal(err)
				}
				if len(getCSR(t, remote, "c").Status.Certificate) == 0 {
					t.Fatal("not signed once the management cluster's object was repaired")
				}
			})
		}
	}
}

// TestIgnoredRequestRetry is the table of when the controller looks again
// at a request it leaves pending, for each reason: a bootstrap token, a Node
// or its addresses not seen yet are looked at again after transientRetry;
// unreadable pinned addresses return the read error for a retry with
// backoff; a request left to an administrator or to someone else comes back
// with its update event, or for its cleanup a day after its creation. It is
// the behaviour the reasons had when the retry was chosen from their text.
func TestIgnoredRequestRetry(t *testing.T) {
	clientSigner, servingSigner := certificatesv1.KubeAPIServerClientKubeletSignerName, certificatesv1.KubeletServingSignerName
	pinFailure := errors.New("etcdserver: request timed out")
	cleanup := csrlib.PendingLifetime - time.Minute // the request was created a minute ago
	tests := []struct {
		name        string
		reason      string
		signer      string
		user        string
		groups      []string
		nodes       []client.Object
		approval    v1alpha1.CSRApprovalPolicy
		pinErr      error
		wantRequeue time.Duration
		wantErr     error
	}{
		// (The cache does not show the token yet: one that is gone deletes
		// the request, TestARequestMadeWithATokenGoneSinceIsDeleted.)
		{"a bootstrap token that is not Carousel's (yet)", csrlib.ReasonForeignToken, clientSigner, "system:bootstrap:zzzzzz", []string{"system:bootstrappers", bootstrap.Group("prod")},
			[]client.Object{token("prod", "zzzzzz", map[string]string{"expiration": testNow.Add(time.Hour).Format(time.RFC3339)})},
			v1alpha1.CSRApprovalPolicy{Client: v1alpha1.ApprovalAuto}, nil, transientRetry, nil},
		{"a Node not registered (yet)", csrlib.ReasonUnknownNode, servingSigner, "system:node:worker-1", []string{"system:nodes"},
			nil, v1alpha1.CSRApprovalPolicy{Serving: v1alpha1.ApprovalAuto}, nil, transientRetry, nil},
		{"a Node without addresses (yet)", csrlib.ReasonNodeWithoutAddresses, servingSigner, "system:node:worker-1", []string{"system:nodes"},
			[]client.Object{workerNode("uid-1")}, v1alpha1.CSRApprovalPolicy{Serving: v1alpha1.ApprovalAuto}, nil, transientRetry, nil},
		{"pinned addresses unreadable", csrlib.ReasonPinUnavailable, servingSigner, "system:node:worker-1", []string{"system:nodes"},
			[]client.Object{workerNode("uid-1", "worker-1")},
			v1alpha1.CSRApprovalPolicy{Serving: v1alpha1.ApprovalAuto, ServingAddresses: v1alpha1.ServingAddressesFirstSeen}, pinFailure, 0, pinFailure},
		{"client approval is manual", "ManualApproval", clientSigner, "system:bootstrap:abcdef", []string{"system:bootstrappers", bootstrap.Group("prod")},
			nil, v1alpha1.CSRApprovalPolicy{Client: v1alpha1.ApprovalManual}, nil, cleanup, nil},
		{"serving approval is manual", "ManualApproval", servingSigner, "system:node:worker-1", []string{"system:nodes"},
			[]client.Object{workerNode("uid-1", "worker-1")}, v1alpha1.CSRApprovalPolicy{Serving: v1alpha1.ApprovalManual}, nil, cleanup, nil},
		{"requested by someone else", "OtherRequester", clientSigner, "alice", []string{"system:authenticated"},
			nil, v1alpha1.CSRApprovalPolicy{Client: v1alpha1.ApprovalAuto}, nil, cleanup, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.cluster.Spec.KubeletBootstrap.CSRApproval = tt.approval
			var sans []string
			if tt.signer == servingSigner {
				sans = []string{"worker-1"}
			}
			obj := kubeletCSR(t, "c", tt.signer, testKey(t), testNow.Add(-time.Minute), sans...)
			obj.Spec.Username, obj.Spec.Groups = tt.user, tt.groups
			f.remote = append(append(f.remote, tt.nodes...), obj)
			r, _ := f.build(nil)
			if tt.pinErr != nil || tt.reason == csrlib.ReasonForeignToken {
				r.remote = interceptor.NewClient(r.remote.(client.WithWatch), interceptor.Funcs{
					Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
						switch obj.(type) {
						case *unstructured.Unstructured: // read past the cache: a pin, the token
							if tt.pinErr != nil {
								return tt.pinErr
							}
						case *corev1.Secret: // the cache does not show the token yet
							return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
						}
						return c.Get(ctx, key, obj, opts...)
					},
				})
			}
			// The reason is the one the table names.
			got := getCSR(t, r.remote, "c")
			pins := pinStore{client: r.remote, cluster: f.cluster.Name}
			d := csrlib.Decide(got, csrlib.Policy{
				BootstrapGroup:     bootstrap.Group(f.cluster.Name),
				IsCarouselToken:    func(id string) bool { return r.isCarouselToken(context.Background(), f.cluster, id) },
				AutoApproveClient:  tt.approval.Client != v1alpha1.ApprovalManual,
				AutoApproveServing: tt.approval.Serving == v1alpha1.ApprovalAuto,
				Node:               func(node string) (csrlib.NodeInfo, bool) { return r.node(context.Background(), node) },
				FirstSeenAddresses: tt.approval.ServingAddresses == v1alpha1.ServingAddressesFirstSeen,
				Pinned: func(node string) (*csrlib.AddressPin, error) {
					pin, _, err := pins.get(context.Background(), node)
					return pin, err
				},
			})
			if d.Verdict != csrlib.Ignore || d.Reason != tt.reason {
				t.Fatalf("Decide = %+v, want Ignore/%s", d, tt.reason)
			}

			res, err := reconcileCSR(t, r, "c")
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Reconcile = %v, want the read error for a retry with backoff", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tt.wantRequeue {
				t.Fatalf("looked at again after %s, want %s", res.RequeueAfter, tt.wantRequeue)
			}
			if got := getCSR(t, r.remote, "c"); len(got.Status.Conditions) != 0 {
				t.Fatalf("decided a request it leaves pending: %+v", got.Status.Conditions)
			}
		})
	}
}

// TestRetryAfter: a young request left pending is looked at again every
// transientRetry, an older one less often, never less than every
// maxTransientRetry.
func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct{ age, want time.Duration }{
		{0, transientRetry},
		{time.Minute, transientRetry},
		{10 * time.Minute, 30 * time.Second},
		{time.Hour, 3 * time.Minute},
		{2 * time.Hour, maxTransientRetry},
		{csrlib.PendingLifetime, maxTransientRetry},
		{-time.Hour, transientRetry}, // a creation time ahead of the clock
	} {
		if got := retryAfter(tc.age); got != tc.want {
			t.Errorf("retryAfter(%s) = %s, want %s", tc.age, got, tc.want)
		}
	}
}

// A request left pending for what may never come (a serving CSR of a Node
// that never registers) stays pending, and a request hours old is looked at
// again every maxTransientRetry, not every transientRetry for the rest of
// its day.
func TestAnOldRequestLeftPendingIsLookedAtLessOften(t *testing.T) {
	f := newFixture(t)
	obj := kubeletCSR(t, "c", certificatesv1.KubeletServingSignerName, testKey(t), testNow.Add(-10*time.Hour), "worker-1")
	obj.Spec.Username, obj.Spec.Groups = "system:node:worker-1", []string{"system:nodes"}
	f.remote = append(f.remote, obj)
	r, _ := f.build(nil)
	res, err := reconcileCSR(t, r, "c")
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != maxTransientRetry {
		t.Fatalf("a request 10 hours old is looked at again after %s, want %s", res.RequeueAfter, maxTransientRetry)
	}
	if got := getCSR(t, r.remote, "c"); len(got.Status.Conditions) != 0 {
		t.Fatalf("decided a request it leaves pending: %+v", got.Status.Conditions)
	}
}

// TestSigningCAsMoveWithTheControlPlane: during a rotation both kinds of
// kubelet certificates are signed by the old CAs (client, kubelet) until
// Carousel's own client certificate moved to the new client CA, which is when
// the API server rolled out trusting every new CA, and by the new CAs from
// then on. Serving certificates thus move in Preparing, while the API server
// still trusts the old kubelet CA too, not in Finalizing, when it stops; a
// kubelet CA not rotated yet signs on. An abort signs from the old CAs at
// once, before or after it swapped them back, wherever Carousel's own client
// certificate is: never from a CA it deletes.
func TestSigningCAsMoveWithTheControlPlane(t *testing.T) {
	const (
		before = iota // the CA of before the rotation
		after         // the rotation's new CA
	)
	for _, tc := range []struct {
		name string
		// client and kubelet are the CA Secrets (current, previous), each
		// CA before or after, or -1 for none; operator is the issuer of
		// Carousel's own client certificate.
		client, kubelet     [2]int
		operator            int
		wantClient, wantSrv int
	}{
		{"Preparing, operator on the old client CA", [2]int{after, before}, [2]int{after, before}, before, before, before},
		{"Preparing, operator on the new client CA", [2]int{after, before}, [2]int{after, before}, after, after, after},
		{"Preparing, the kubelet CA not rotated yet", [2]int{after, before}, [2]int{before, -1}, before, before, before},
		{"Aborting, not swapped back yet, operator on the new client CA", [2]int{after, before}, [2]int{after, before}, after, before, before},
		{"Aborting, swapped back, operator still on the new client CA", [2]int{before, after}, [2]int{before, after}, after, before, before},
		{"Aborting, swapped back, operator back on the old client CA", [2]int{before, after}, [2]int{before, after}, before, before, before},
		{"Aborting, the new CAs deleted", [2]int{before, -1}, [2]int{before, -1}, before, before, before},
	} {
		for _, signer := range []string{certificatesv1.KubeAPIServerClientKubeletSignerName, certificatesv1.KubeletServingSignerName} {
			t.Run(tc.name+"/"+signer, func(t *testing.T) {
				f := newFixture(t)
				newCA := func(name string) *pki.KeyPair {
					kp, err := pki.NewCA(pki.CATemplate{CommonName: name, Validity: 48 * time.Hour}, testKey(t), testNow.Add(-time.Minute))
					if err != nil {
						t.Fatal(err)
					}
					return kp
				}
				clientCAs := [2]*pki.KeyPair{before: f.clientCA, after: newCA("client-ca-2")}
				kubeletCAs := [2]*pki.KeyPair{before: f.kubeletCA, after: newCA("kubelet-ca-2")}
				pick := func(cas [2]*pki.KeyPair, which int) *pki.KeyPair {
					if which < 0 {
						return nil
					}
					return cas[which]
				}
				phase := v1alpha1.RotationPreparing
				if strings.HasPrefix(tc.name, "Aborting") {
					phase = v1alpha1.RotationAborting
				}
				f.cluster.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{
					CertificateAuthorities: &v1alpha1.CARotation{Phase: phase}}}
				// The Secret as ensureCAs writes it: an abort's swap says so.
				aborted := func(layout [2]int) string {
					if layout[0] == before && layout[1] == after {
						return "r"
					}
					return ""
				}
				secrets := map[string]*credentials.CAs{}
				for name, layout := range map[string]struct {
					cas    [2]*pki.KeyPair
					layout [2]int
				}{
					credentials.CASecretName(f.cluster.Name, v1alpha1.CARoleClient):  {clientCAs, tc.client},
					credentials.CASecretName(f.cluster.Name, v1alpha1.CARoleKubelet): {kubeletCAs, tc.kubelet},
				} {
					secrets[name] = &credentials.CAs{Current: pick(layout.cas, layout.layout[0]), Previous: pick(layout.cas, layout.layout[1]),
						Rotation: "r", AbortedRotation: aborted(layout.layout)}
				}
				operator := credentials.CertificateSecretName(f.cluster.Name, credentials.CertOperator)
				for _, o := range f.management {
					s, ok := o.(*corev1.Secret)
					if !ok {
						continue
					}
					if cas, ok := secrets[s.Name]; ok {
						data, err := credentials.EncodeCASecretData(cas)
						if err != nil {
							t.Fatal(err)
						}
						s.Data = data
						s.Annotations = map[string]string{v1alpha1.AnnotationRotation: cas.Rotation}
						if cas.AbortedRotation != "" {
							s.Annotations[v1alpha1.AnnotationAbortedRotation] = cas.AbortedRotation
						}
					}
					if s.Name == operator {
						leaf, err := clientCAs[tc.operator].IssueKeyPair(pki.LeafTemplate{CommonName: credentials.CertOperator,
							Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Hour}, pki.ECDSAP256, testNow.Add(-time.Minute))
						if err != nil {
							t.Fatal(err)
						}
						s.Data = map[string][]byte{v1alpha1.DataKeyCertificate: leaf.CertPEM()}
					}
				}
				var sans []string
				want := clientCAs[tc.wantClient]
				if signer == certificatesv1.KubeletServingSignerName {
					sans = []string{"worker-1"}
					want = kubeletCAs[tc.wantSrv]
				}
				obj := kubeletCSR(t, "c", signer, testKey(t), testNow.Add(-time.Minute), sans...)
				obj.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{conditionAt(certificatesv1.CertificateApproved, testNow)}
				f.remote = append(f.remote, obj)
				r, remote := f.build(nil)
				if _, err := reconcileCSR(t, r, "c"); err != nil {
					t.Fatal(err)
				}
				certs, err := pki.ParseCertificates(getCSR(t, remote, "c").Status.Certificate)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(certs[0].AuthorityKeyId, want.Cert.SubjectKeyId) {
					t.Fatalf("signed by %q, want %q", certs[0].Issuer.CommonName, want.Cert.Subject.CommonName)
				}
			})
		}
	}
}

// A token Secret labelled for the cluster but without a readable expiration
// (which the API server would honour for ever), or one the API server does
// not authenticate into the Cluster's group, is not one of Carousel's; nor is
// one valid for longer than the Cluster's tokenTTL (lowered since, after a
// leak, say), which the token reconciler drops: while its deletion fails (an
// admission policy refusing it), it vouches for no kubelet.
func TestACarouselTokenIsLabelledAndExpires(t *testing.T) {
	valid := map[string]string{"expiration": testNow.Add(time.Hour).Format(time.RFC3339)}
	opaque := token("prod", "uvwxyz", valid)
	opaque.Type = corev1.SecretTypeOpaque
	remote := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(
		token("prod", "abcdef", valid), token("prod", "ghijkl", nil), token("other", "mnopqr", valid), opaque,
		token("prod", "longer", map[string]string{"expiration": testNow.Add(2 * time.Hour).Format(time.RFC3339)}),
	).Build()
	r := &csrReconciler{remote: remote, clock: clocktesting.NewFakeClock(testNow)}
	prod := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod"}}
	prod.Spec.KubeletBootstrap.TokenTTL = &metav1.Duration{Duration: time.Hour}
	for id, want := range map[string]bool{"abcdef": true, "ghijkl": false, "mnopqr": false, "stuvwx": false, "uvwxyz": false, "longer": false} {
		if got := r.isCarouselToken(context.Background(), prod, id); got != want {
			t.Errorf("isCarouselToken(%s) = %v, want %v", id, got, want)
		}
	}
}

// token is a bootstrap-token Secret of id labelled for cluster, in its
// token group, with data added.
func token(cluster, id string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-" + id,
		Labels: map[string]string{v1alpha1.LabelBootstrapToken: cluster}}, Type: bootstrapapi.SecretTypeBootstrapToken,
		Data: map[string][]byte{"token-id": []byte(id), "token-secret": []byte("0123456789abcdef"),
			"usage-bootstrap-authentication": []byte("true"), "auth-extra-groups": []byte(bootstrap.Group(cluster))}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// TestARequestMadeWithATokenGoneSinceIsDeleted: a kubelet whose bootstrap
// token is deleted (or expired) before Carousel decided its request waits on
// that request by name however its bootstrap kubeconfig changes; the request
// is deleted, so that it makes it again with a live token. A token the
// cache does not show yet, or another tool's in the Cluster's token group,
// leaves it pending as before.
func TestARequestMadeWithATokenGoneSinceIsDeleted(t *testing.T) {
	live := map[string]string{"expiration": testNow.Add(time.Hour).Format(time.RFC3339)}
	expired := map[string]string{"expiration": testNow.Add(-time.Second).Format(time.RFC3339)}
	unlabelled := token("prod", "zzzzzz", expired)
	unlabelled.Labels = nil
	for _, tc := range []struct {
		name        string
		token       *corev1.Secret // in the managed cluster; nil: none
		cacheBehind bool           // the cache does not show the token
		readErr     error          // of the read past the cache
		changed     bool           // the request changed since it was read (approved): the delete conflicts
		wantDeleted bool
	}{
		{"the token was deleted", nil, false, nil, false, true},
		{"the token cannot be read", nil, false, apierrors.NewForbidden(corev1.Resource("secrets"), "bootstrap-token-zzzzzz", errors.New("denied")), false, false},
		{"the request changed since it was read", nil, false, nil, true, false},
		{"the token expired", token("prod", "zzzzzz", expired), false, nil, false, true},
		// Still authenticated: the kubelet would ask again with it. Carousel
		// deletes such a token, and then the request.
		{"the token is valid for longer than the Cluster keeps one", token("prod", "zzzzzz", map[string]string{"expiration": testNow.Add(48 * time.Hour).Format(time.RFC3339)}), false, nil, false, false},
		{"the cache does not show the token yet", token("prod", "zzzzzz", live), true, nil, false, false},
		{"another tool's token in the token group, expired", unlabelled, false, nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.cluster.Spec.KubeletBootstrap.TokenTTL = &metav1.Duration{Duration: 24 * time.Hour}
			obj := kubeletCSR(t, "c", certificatesv1.KubeAPIServerClientKubeletSignerName, testKey(t), testNow.Add(-time.Minute))
			obj.Spec.Username, obj.Spec.Groups = "system:bootstrap:zzzzzz", []string{"system:bootstrappers", bootstrap.Group("prod")}
			f.remote = append(f.remote, obj)
			if tc.token != nil {
				f.remote = append(f.remote, tc.token)
			}
			f.remoteFuncs = &interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					switch obj.(type) {
					case *corev1.Secret:
						if tc.cacheBehind {
							return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
						}
					case *unstructured.Unstructured: // read past the cache
						if tc.readErr != nil {
							return tc.readErr
						}
					}
					return c.Get(ctx, key, obj, opts...)
				},
				Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
					if tc.changed {
						return apierrors.NewConflict(certificatesv1.Resource("certificatesigningrequests"), obj.GetName(), errors.New("the object has been modified"))
					}
					return c.Delete(ctx, obj, opts...)
				},
			}
			r, remote := f.build(nil)
			res, err := reconcileCSR(t, r, "c")
			if tc.readErr != nil {
				if !errors.Is(err, tc.readErr) {
					t.Fatalf("Reconcile = %v, want the read's error, for a retry with backoff", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			err = remote.Get(context.Background(), client.ObjectKey{Name: "c"}, &certificatesv1.CertificateSigningRequest{})
			if deleted := apierrors.IsNotFound(err); deleted != tc.wantDeleted {
				t.Fatalf("deleted: %v (%v), want %v", deleted, err, tc.wantDeleted)
			}
			if !tc.wantDeleted && tc.readErr == nil && !tc.changed && res.RequeueAfter != transientRetry {
				t.Fatalf("a request left pending is looked at again after %s, want %s", res.RequeueAfter, transientRetry)
			}
		})
	}
}

// TestADecisionIsCountedOnceItIsWritten approves a CSR whose first approval
// write conflicts: carousel_csr_decisions_total counts the approval once, and
// a CSR deleted after its approval but before its signing leaves no entry in
// the approval times.
func TestADecisionIsCountedOnceItIsWritten(t *testing.T) {
	f := newFixture(t)
	f.remote = append(f.remote, kubeletCSR(t, "c", certificatesv1.KubeAPIServerClientKubeletSignerName, testKey(t), testNow))
	conflicts := 1
	f.remoteFuncs = &interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		if sub == "approval" && conflicts > 0 {
			conflicts--
			return apierrors.NewConflict(schema.GroupResource{Group: certificatesv1.GroupName, Resource: "certificatesigningrequests"}, obj.GetName(), errors.New("changed"))
		}
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}}
	r, remote := f.build(nil)
	r.metrics = NewMetrics(prometheus.NewRegistry())
	for range 2 {
		if _, err := reconcileCSR(t, r, "c"); err != nil {
			t.Fatal(err)
		}
	}
	if _, approved := hasCondition(getCSR(t, remote, "c"), certificatesv1.CertificateApproved); !approved {
		t.Fatal("not approved")
	}
	if got := testutil.ToFloat64(r.metrics.decisions); got != 1 {
		t.Errorf("carousel_csr_decisions_total = %v, want 1 for one approval written", got)
	}

	if err := remote.Delete(context.Background(), getCSR(t, remote, "c")); err != nil {
		t.Fatal(err)
	}
	if _, err := reconcileCSR(t, r, "c"); err != nil {
		t.Fatal(err)
	}
	r.approvedAt.Range(func(name, _ any) bool {
		t.Errorf("the approval time of %v is kept after its CSR is gone", name)
		return true
	})
}
