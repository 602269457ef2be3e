package kubeletcsr

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/oldca"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// kubeletRecord reads the Cluster's record of signed kubelet certificates.
func kubeletRecord(t *testing.T, c client.Reader, cluster *v1alpha1.Cluster) (*corev1.ConfigMap, *oldca.KubeletCertificates) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: cluster.Namespace, Name: credentials.KubeletCertificatesConfigMapName(cluster.Name)}
	if err := c.Get(context.Background(), key, cm); err != nil {
		t.Fatalf("the record: %v", err)
	}
	record, err := oldca.ReadKubeletCertificates(cm.Data, cm.BinaryData)
	if err != nil {
		t.Fatal(err)
	}
	return cm, record
}

// nodeCert is the i-th kubelet client certificate of a test's record.
func nodeCert(i int) oldca.IssuedCertificate {
	return oldca.IssuedCertificate{User: fmt.Sprintf("system:node:w%d", i), Fingerprint: fmt.Sprint(i), Issuer: "ca",
		IssuedAt: testNow, NotAfter: testNow.Add(time.Hour)}
}

// TestACertificateIsRecordedBeforeItIsPosted: a kubelet never holds a
// certificate the record lacks. While the record cannot be written, the CSR
// stays unsigned (and is retried); once it can, the certificate posted is
// the one recorded, with the CA that signed it. Serving certificates are
// recorded as such, for an abort to tell which kubelets serve from the new
// kubelet CA.
func TestACertificateIsRecordedBeforeItIsPosted(t *testing.T) {
	f := newFixture(t)
	client1 := kubeletCSR(t, "client-1", certificatesv1.KubeAPIServerClientKubeletSignerName, testKey(t), testNow.Add(-time.Minute))
	serving := kubeletCSR(t, "serving-1", certificatesv1.KubeletServingSignerName, testKey(t), testNow.Add(-time.Minute), "worker-1")
	for _, obj := range []*certificatesv1.CertificateSigningRequest{client1, serving} {
		obj.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{conditionAt(certificatesv1.CertificateApproved, testNow)}
		f.remote = append(f.remote, obj)
	}
	refused := errors.New("admission webhook refused the write")
	var failing atomic.Bool
	failing.Store(true)
	r, remote := f.build(&interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*corev1.ConfigMap); ok && failing.Load() {
			return refused
		}
		return c.Create(ctx, obj, opts...)
	}})
	management := r.management.(client.Client)
	r.recorder = NewRecorder(management, management, f.clock, 24*time.Hour, nil)

	if _, err := reconcileCSR(t, r, "client-1"); !errors.Is(err, refused) {
		t.Fatalf("Reconcile = %v, want the record's error returned for a retry", err)
	}
	if got := getCSR(t, remote, "client-1").Status.Certificate; len(got) != 0 {
		t.Fatal("the certificate was posted though it could not be recorded")
	}
	failing.Store(false)
	if _, err := reconcileCSR(t, r, "client-1"); err != nil {
		t.Fatal(err)
	}
	posted, err := pki.ParseCertificates(getCSR(t, remote, "client-1").Status.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	cm, record := kubeletRecord(t, management, f.cluster)
	want := oldca.IssuedCertificate{User: "system:node:worker-1", Fingerprint: pki.Fingerprint(posted[0]),
		Issuer: hex.EncodeToString(f.clientCA.Cert.SubjectKeyId), IssuedAt: testNow, NotAfter: posted[0].NotAfter.UTC()}
	if len(record.Signed) != 1 || record.Signed[0] != want {
		t.Fatalf("record %+v, want only %+v", record.Signed, want)
	}
	if owner := metav1.GetControllerOf(cm); owner == nil || owner.Name != f.cluster.Name {
		t.Fatalf("the record is not controlled by its Cluster: %v", cm.OwnerReferences)
	}
	if _, cached := cm.Labels[v1alpha1.LabelCluster]; cached {
		t.Fatalf("the record has the label by which the manager caches and watches objects: %v", cm.Labels)
	}

	if _, err := reconcileCSR(t, r, "serving-1"); err != nil {
		t.Fatal(err)
	}
	servingCert, err := pki.ParseCertificates(getCSR(t, remote, "serving-1").Status.Certificate)
	if err != nil {
		t.Fatalf("the serving certificate was not signed: %v", err)
	}
	wantServing := oldca.IssuedCertificate{User: "system:node:worker-1", Fingerprint: pki.Fingerprint(servingCert[0]),
		Issuer: hex.EncodeToString(f.kubeletCA.Cert.SubjectKeyId), IssuedAt: testNow, NotAfter: servingCert[0].NotAfter.UTC(), Serving: true}
	if _, record := kubeletRecord(t, management, f.cluster); len(record.Signed) != 2 || record.Signed[0] != want || record.Signed[1] != wantServing {
		t.Fatalf("record %+v, want the client certificate and then the serving one, from the kubelet CA: %+v", record.Signed, wantServing)
	}
}

// TestRecorderWritesConcurrentCertificatesTogether: the certificates signed
// while a write is under way go into one next write, and one written by
// another replica meanwhile is kept, whether it comes between the writes of
// one burst (when the writer keeps the record it parsed) or after.
func TestRecorderWritesConcurrentCertificatesTogether(t *testing.T) {
	f := newFixture(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var writes atomic.Int32
	var otherReplica sync.Once
	r, _ := f.build(&interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				writes.Add(1)
				close(entered)
				<-release
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			cm, ok := obj.(*corev1.ConfigMap)
			if !ok {
				return c.Update(ctx, obj, opts...)
			}
			writes.Add(1)
			var err error
			otherReplica.Do(func() { // writes first, between the two writes of the burst
				other := &corev1.ConfigMap{}
				if err = c.Get(ctx, client.ObjectKeyFromObject(cm), other); err != nil {
					return
				}
				var record *oldca.KubeletCertificates
				if record, err = oldca.ReadKubeletCertificates(other.Data, other.BinaryData); err != nil {
					return
				}
				oldca.StoreKubeletCertificates(record.Add([]oldca.IssuedCertificate{nodeCert(50)}, testNow), other.Data, other.BinaryData)
				err = c.Update(ctx, other)
			})
			if err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	management := r.management.(client.Client)
	rec := NewRecorder(management, management, f.clock, 24*time.Hour, nil)
	const n = 10
	errs := make(chan error, n+1)
	go func() { errs <- rec.Record(context.Background(), f.cluster, nodeCert(0)) }()
	<-entered
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Go(func() { errs <- rec.Record(context.Background(), f.cluster, nodeCert(i)) })
	}
	// Every one of them is queued behind the write under way.
	rec.mu.Lock()
	queue := rec.records[client.ObjectKeyFromObject(f.cluster)]
	rec.mu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); ; {
		queue.mu.Lock()
		queued := len(queue.pending)
		queue.mu.Unlock()
		if queued == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d certificates queued", queued, n)
		}
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	for range n + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := writes.Load(); got != 3 {
		t.Fatalf("%d writes for %d certificates signed during one write, want 3: the first, then the rest together, "+
			"which conflicted with another replica's write and was made again", got, n+1)
	}
	if _, record := kubeletRecord(t, management, f.cluster); len(record.Signed) != n+2 {
		t.Fatalf("record has %d certificates, want %d: %d signed here and another replica's", len(record.Signed), n+2, n+1)
	}

	// Another replica's write, then this one's: both stay.
	cm, record := kubeletRecord(t, management, f.cluster)
	record.Add([]oldca.IssuedCertificate{nodeCert(100)}, testNow)
	oldca.StoreKubeletCertificates(record.String(), cm.Data, cm.BinaryData)
	if err := management.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	if err := rec.Record(context.Background(), f.cluster, nodeCert(101)); err != nil {
		t.Fatal(err)
	}
	if _, record := kubeletRecord(t, management, f.cluster); len(record.Signed) != n+4 {
		t.Fatalf("record has %d certificates, want %d: another replica's was lost", len(record.Signed), n+4)
	}
}

// TestRecorderStartsABrokenRecordOver: a record that does not parse does
// not stop kubelets from joining. It is started over, and it says that it
// cannot vouch for what it lost until the longest-lived certificate signed
// before can have expired.
func TestRecorderStartsABrokenRecordOver(t *testing.T) {
	f := newFixture(t)
	f.management = append(f.management, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.cluster.Namespace,
		Name: credentials.KubeletCertificatesConfigMapName(f.cluster.Name)}, BinaryData: map[string][]byte{oldca.KubeletCertificatesDataKey: []byte("{")}})
	r, _ := f.build(nil)
	management := r.management.(client.Client)
	cert := oldca.IssuedCertificate{User: "system:node:w0", Fingerprint: "01", Issuer: "ca", IssuedAt: testNow, NotAfter: testNow.Add(time.Hour)}
	if err := NewRecorder(management, management, f.clock, 24*time.Hour, nil).Record(context.Background(), f.cluster, cert); err != nil {
		t.Fatal(err)
	}
	_, record := kubeletRecord(t, management, f.cluster)
	if len(record.Signed) != 1 || record.Signed[0] != cert {
		t.Fatalf("record %+v, want only the new certificate", record.Signed)
	}
	if lost := testNow.Add(24 * time.Hour); record.UnrecordedUntil == nil || !record.UnrecordedUntil.Equal(lost) ||
		record.UnrecordedServingUntil == nil || !record.UnrecordedServingUntil.Equal(lost) {
		t.Fatalf("unrecorded until %v, serving until %v, want %v: a certificate of either kind signed just before the record broke may be valid until then",
			record.UnrecordedUntil, record.UnrecordedServingUntil, lost)
	}
}

// TestRecorderForgetsIdleClusters: once a Cluster's certificates are
// written, the recorder keeps nothing of it, so that a fleet whose Clusters
// come and go does not grow it; the next certificate for the Cluster is
// added to what its record holds.
func TestRecorderForgetsIdleClusters(t *testing.T) {
	f := newFixture(t)
	r, _ := f.build(nil)
	management := r.management.(client.Client)
	rec := NewRecorder(management, management, f.clock, 24*time.Hour, nil)
	for i := range 2 {
		if err := rec.Record(context.Background(), f.cluster, nodeCert(i)); err != nil {
			t.Fatal(err)
		}
		// The writer drops the record after it has answered.
		for deadline := time.Now().Add(10 * time.Second); ; {
			rec.mu.Lock()
			held := len(rec.records)
			rec.mu.Unlock()
			if held == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after write %d the recorder still holds %d records, want none", i+1, held)
			}
			runtime.Gosched()
		}
	}
	if _, record := kubeletRecord(t, management, f.cluster); len(record.Signed) != 2 {
		t.Fatalf("record has %d certificates, want 2", len(record.Signed))
	}
}
