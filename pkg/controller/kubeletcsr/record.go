package kubeletcsr

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/oldca"
)

// Recorder keeps each Cluster's record of the kubelet certificates Carousel
// signs (oldca.KubeletCertificates): the old-CA usage gate reads its client
// certificates to judge kubelets that no node agent reports for, and an
// abort reads both kinds for the kubelets still on the new CAs. The signer
// records a certificate before it posts it, so that no kubelet holds one the
// record lacks.
//
// The record's ConfigMap is controlled by its Cluster, for the garbage
// collector, and has no carousel.dev/cluster label: the manager neither
// caches it nor hears of its writes (up to one per batch of CSRs, of a
// record that grows with the nodes). The gate reads it when it looks, in
// Prepared, when the signer signs from the new client CA only, so a write it
// has not seen can only clear a node, never add one.
//
// Writes are group commits, one writer per Cluster: the certificates signed
// for a Cluster while its record is being written go into the next write
// together, so a storm of bootstrapping kubelets costs a write per batch,
// not per CSR. While batches follow each other, the writer keeps the
// ConfigMap it last wrote and reads it again only after a conflict (another
// replica wrote it), so a batch costs one request; the first of a burst
// reads it first.
type Recorder struct {
	client    client.Client // the management cluster
	apiReader client.Reader // the management cluster, uncached
	clock     clock.PassiveClock
	// maxValidity is the longest validity of a certificate the signer
	// issues: how long a record started over cannot vouch for kubelets.
	maxValidity time.Duration
	metrics     *Metrics

	// mu guards records, the Clusters with certificates being written; it
	// is taken before a record's own lock.
	mu      sync.Mutex
	records map[client.ObjectKey]*record
}

// NewRecorder returns a Recorder that writes with c, reads with apiReader
// (uncached), takes the time from clk, records certificates valid for at
// most maxValidity and counts its writes in metrics (which may be nil).
func NewRecorder(c client.Client, apiReader client.Reader, clk clock.PassiveClock, maxValidity time.Duration, metrics *Metrics) *Recorder {
	return &Recorder{client: c, apiReader: apiReader, clock: clk, maxValidity: maxValidity, metrics: metrics, records: map[client.ObjectKey]*record{}}
}

// record is one Cluster's record as its writer sees it.
type record struct {
	mu      sync.Mutex
	pending []signed // waiting for the next write
	writing bool     // a writer runs; only it touches written
	// written is the ConfigMap as last written or read; nil: read it again.
	written *corev1.ConfigMap
	// parsed is the record written holds, kept so that a batch does not
	// parse what the last one wrote; nil: parse it from written.
	parsed *oldca.KubeletCertificates
}

// signed is a certificate waiting to be recorded, and its signer waiting.
type signed struct {
	cluster *v1alpha1.Cluster
	cert    oldca.IssuedCertificate
	done    chan error
}

// recordTimeout bounds one write of a record.
const recordTimeout = 30 * time.Second

// Record adds cert, signed for the Cluster c, to c's record, and returns
// once it is written, with the write's error, or when ctx ends.
func (r *Recorder) Record(ctx context.Context, c *v1alpha1.Cluster, cert oldca.IssuedCertificate) error {
	key := client.ObjectKeyFromObject(c)
	done := make(chan error, 1)
	r.mu.Lock() // held until queued: the writer drops an idle record under it
	rec := r.records[key]
	if rec == nil {
		rec = &record{}
		r.records[key] = rec
	}
	rec.mu.Lock()
	rec.pending = append(rec.pending, signed{cluster: c, cert: cert, done: done})
	if !rec.writing {
		rec.writing = true
		go r.write(key, rec)
	}
	rec.mu.Unlock()
	r.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// write writes rec's pending certificates, a batch at a time, until none
// are left, and then drops rec: an idle record keeps nothing in memory, not
// even its Cluster's key, so a fleet whose Clusters come and go does not
// fill it. The next certificate signed for the Cluster starts a new record,
// which reads the ConfigMap first.
func (r *Recorder) write(key client.ObjectKey, rec *record) {
	for {
		r.mu.Lock()
		rec.mu.Lock()
		batch := rec.pending
		rec.pending = nil
		if len(batch) == 0 {
			rec.writing = false
			delete(r.records, key)
			rec.mu.Unlock()
			r.mu.Unlock()
			return
		}
		rec.mu.Unlock()
		r.mu.Unlock()
		certs := make([]oldca.IssuedCertificate, len(batch))
		for i, s := range batch {
			certs[i] = s.cert
		}
		ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
		err := credentials.WriteRecord(func() error { return r.merge(ctx, key, rec, batch[len(batch)-1].cluster, certs) })
		cancel()
		if err == nil {
			r.metrics.recorded(len(batch))
		}
		for _, s := range batch {
			s.done <- err
		}
	}
}

// merge adds certs to the Cluster's record ConfigMap, creating it
// (controlled by c) when there is none.
func (r *Recorder) merge(ctx context.Context, key client.ObjectKey, rec *record, c *v1alpha1.Cluster, certs []oldca.IssuedCertificate) error {
	name := client.ObjectKey{Namespace: key.Namespace, Name: credentials.KubeletCertificatesConfigMapName(key.Name)}
	if rec.written == nil {
		cm := &corev1.ConfigMap{}
		err := r.apiReader.Get(ctx, name, cm)
		if apierrors.IsNotFound(err) {
			// Owned by the Cluster as it is now: a cached one may be a
			// deleted Cluster of the same name, whose garbage collection
			// would take the new record along.
			fresh := &v1alpha1.Cluster{}
			if err := r.apiReader.Get(ctx, key, fresh); err != nil {
				return fmt.Errorf("reading the Cluster: %w", err)
			}
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: name.Name}}
			record := &oldca.KubeletCertificates{}
			if err := r.fill(cm, fresh, record, certs); err != nil {
				return err
			}
			if err := r.client.Create(ctx, cm); err != nil {
				return err
			}
			rec.written, rec.parsed = cm, record
			return nil
		}
		if err != nil {
			return err
		}
		rec.written, rec.parsed = cm, nil
	}
	record := rec.parsed
	if record == nil {
		var err error
		if record, err = oldca.ReadKubeletCertificates(rec.written.Data, rec.written.BinaryData); err != nil {
			// Refusing to sign would stop every kubelet from joining: start
			// the record over instead, which cannot vouch for the
			// certificates it lost until the last of them can have expired.
			log.FromContext(ctx).Info("the record of signed kubelet certificates does not parse; starting it over", "configMap", name, "error", err.Error())
			lost := r.clock.Now().Add(r.maxValidity).UTC()
			record = &oldca.KubeletCertificates{UnrecordedUntil: &lost, UnrecordedServingUntil: &lost}
		}
	}
	cm := rec.written.DeepCopy()
	err := r.fill(cm, c, record, certs)
	if err == nil {
		err = r.client.Update(ctx, cm) // with the resourceVersion read or written last
	}
	if err != nil {
		// record may hold certs, which were not written: read it again.
		rec.written, rec.parsed = nil, nil
		return err
	}
	rec.written, rec.parsed = cm, record
	return nil
}

// fill adds certs to record and puts it into cm, with the Cluster as its
// controller.
func (r *Recorder) fill(cm *corev1.ConfigMap, c *v1alpha1.Cluster, record *oldca.KubeletCertificates, certs []oldca.IssuedCertificate) error {
	if !c.DeletionTimestamp.IsZero() {
		return errors.New("the Cluster is being deleted")
	}
	if cm.BinaryData == nil {
		cm.BinaryData = map[string][]byte{}
	}
	oldca.StoreKubeletCertificates(record.Add(certs, r.clock.Now()), cm.Data, cm.BinaryData)
	if metav1.GetControllerOf(cm) == nil {
		return controllerutil.SetControllerReference(c, cm, r.client.Scheme())
	}
	return nil
}
