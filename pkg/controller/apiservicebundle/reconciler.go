// Package apiservicebundle keeps the trust the managed cluster's API server
// puts in aggregated API servers in step with a CA rotation: the caBundle of
// every APIService labelled carousel.dev/ca-bundle=metrics-server is the
// Cluster's metrics-server CA bundle, the role that signs the serving
// certificates of aggregated API servers (metrics-server's among them). The
// aggregator verifies such a server with that caBundle only, so it must
// carry the new CA before the server's certificate moves to it (Finalizing),
// and may drop the old one only after.
package apiservicebundle

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/evidence"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/refused"
)

// Reconciler keeps the labelled APIServices' caBundle of each reachable
// managed cluster.
type Reconciler struct {
	Client client.Client // the management cluster
	// Connections reach the managed clusters (a *clustercache.Cache).
	Connections interface {
		Client(*v1alpha1.Cluster) (client.Client, bool)
	}
	// Recorder records an event on the Cluster for each caBundle written,
	// related to the APIService; nil records none.
	Recorder events.EventRecorder
	// Resync is how often a managed cluster is looked at again: its
	// APIServices raise no events here. Zero means DefaultResync.
	Resync time.Duration
	// Concurrency is how many Clusters are reconciled at once; zero means one.
	Concurrency int
}

// DefaultResync is how often, by default, the APIServices are looked at again.
const DefaultResync = time.Minute

// Reconcile writes the metrics-server bundle into every labelled APIService
// whose caBundle differs.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &v1alpha1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !c.DeletionTimestamp.IsZero() || c.Spec.ControlPlane.Endpoint == "" {
		return ctrl.Result{}, nil
	}
	bundle := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, v1alpha1.CARoleMetricsServer)}, bundle)
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, nil // its creation brings the Cluster back
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	want := []byte(bundle.Data[v1alpha1.DataKeyCABundle])
	if err := checkBundle(want); err != nil {
		// A namespace writer may have changed it: the Cluster controller
		// writes it back, which brings the Cluster here again.
		return ctrl.Result{}, fmt.Errorf("ConfigMap %s: %s: %w; no APIService is given it", bundle.Name, v1alpha1.DataKeyCABundle, err)
	}
	resync := r.Resync
	if resync == 0 {
		resync = DefaultResync
	}
	// The kubelet-bootstrap controller alone connects and disconnects, so
	// that a Cluster handed to another shard, or deleted, keeps no
	// connection this controller made meanwhile. Until it has connected
	// (Carousel's client certificate may not be issued yet, the managed API
	// server may be down: it restarts in every phase), look again soon
	// rather than after the growing backoff of a failed reconcile.
	managed, ok := r.Connections.Client(c)
	if !ok {
		return ctrl.Result{RequeueAfter: resync / 10}, nil
	}
	var list apiregistrationv1.APIServiceList
	if err := managed.List(ctx, &list, evidence.MetricsServerAPIServices); err != nil {
		return r.retry(ctx, resync, fmt.Errorf("listing the managed cluster's APIServices: %w", err))
	}
	// One APIService that cannot be written (a webhook refuses it) holds
	// up none of the others.
	var failed []error
	for i := range list.Items {
		service := &list.Items[i]
		if service.Spec.Service == nil {
			log.FromContext(ctx).Info("a labelled APIService is local (no service): the API server serves it and allows it no caBundle; "+
				"label the APIServices of the aggregated API server instead", "apiService", service.Name)
		}
		if !evidence.APIServiceBehind(service, want) {
			continue
		}
		written, err := write(ctx, managed, service, want)
		if err != nil {
			failed = append(failed, err)
			if refused.Is(err) && r.Recorder != nil {
				// Repeated at each retry, the same answer is folded into
				// one series. What the API server failed to serve is only
				// logged (retry).
				r.Recorder.Eventf(c, service, corev1.EventTypeWarning, v1alpha1.EventAPIServiceCABundleNotWritten, "Update",
					"the managed cluster refused the metrics-server CA bundle for APIService %s, which a CA rotation waits for: %s", service.Name, refused.Message(err))
			}
			continue
		}
		if written && r.Recorder != nil {
			// The APIService is the related object: without one, the events
			// library would fold this event into the series of an earlier
			// one about the same version of the Cluster, and its note with it.
			r.Recorder.Eventf(c, service, corev1.EventTypeNormal, v1alpha1.EventAPIServiceCABundleUpdated, "Update",
				"APIService %s of the managed cluster now trusts the metrics-server CA bundle", service.Name)
		}
	}
	if len(failed) > 0 {
		return r.retry(ctx, resync, errors.Join(failed...))
	}
	return ctrl.Result{RequeueAfter: resync}, nil
}

// checkBundle says whether bundle holds CA certificates and nothing else, as
// the Cluster controller writes it.
func checkBundle(bundle []byte) error {
	certs, err := pki.ParseCertificates(bundle)
	if err != nil {
		return err
	}
	for _, cert := range certs {
		if !cert.IsCA {
			return fmt.Errorf("%q is not a CA certificate", cert.Subject.CommonName)
		}
	}
	return nil
}

// retry logs what failed in the managed cluster and looks again after a
// tenth of resync.
func (r *Reconciler) retry(ctx context.Context, resync time.Duration, err error) (ctrl.Result, error) {
	log.FromContext(ctx).Info("the managed cluster's APIServices could not be brought in step; retrying", "error", err.Error())
	return ctrl.Result{RequeueAfter: resync / 10}, nil
}

// write sets an APIService's caBundle, on the version listed: a conflict
// retries the whole pass. It reports false for one deleted since it was
// listed.
func write(ctx context.Context, managed client.Client, s *apiregistrationv1.APIService, bundle []byte) (bool, error) {
	base := s.DeepCopy()
	s.Spec.CABundle = bundle
	s.Spec.InsecureSkipTLSVerify = false
	err := managed.Patch(ctx, s, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("writing the caBundle of APIService %s: %w", s.Name, err)
	}
	return true, nil
}
