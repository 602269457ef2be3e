// Package kubeletcsr approves, denies, signs and cleans up the kubelet CSRs of
// every managed cluster Carousel is connected to: one controller per
// connection, started by the clustercache when it connects and stopped with
// the connection. What it decides is package csr's to say.
package kubeletcsr

import (
	"cmp"
	"context"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/carousel-dev/carousel/pkg/clustercache"
)

// Controllers starts a CSR controller on each connection.
type Controllers struct {
	Management client.Reader // the management cluster (cached): CAs and Clusters
	Clock      clock.PassiveClock
	// MaxDuration caps the validity of the kubelet certificates Carousel signs.
	MaxDuration time.Duration
	// Concurrency is how many CSRs of one managed cluster are decided and
	// signed at once; zero means DefaultConcurrency.
	Concurrency int
	Metrics     *Metrics
}

// DefaultConcurrency is how many CSRs of one managed cluster are handled at
// once unless Controllers says otherwise.
const DefaultConcurrency = 16

// OnConnect is a clustercache.OnConnect: it starts the CSR controller of the
// managed cluster of the Cluster key on conn.
func (cs *Controllers) OnConnect(key client.ObjectKey, conn *clustercache.Connection) error {
	c, err := controller.NewUnmanaged("kubelet-csr-"+key.Namespace+"-"+key.Name, controller.Options{
		Reconciler: &csrReconciler{cluster: key, remote: conn.Cluster.GetClient(), management: cs.Management, clock: cs.Clock,
			maxDuration: cs.MaxDuration, metrics: cs.Metrics},
		MaxConcurrentReconciles: cmp.Or(cs.Concurrency, DefaultConcurrency),
		SkipNameValidation:      ptr.To(true),
	})
	if err != nil {
		return err
	}
	if err := c.Watch(source.Kind(conn.Cluster.GetCache(), &certificatesv1.CertificateSigningRequest{},
		&handler.TypedEnqueueRequestForObject[*certificatesv1.CertificateSigningRequest]{})); err != nil {
		return err
	}
	conn.Run(c.Start)
	return cs.trackBacklog(key, conn)
}

// trackBacklog reports the CSR backlog of the managed cluster from the
// connection's cache for as long as the connection lives.
func (cs *Controllers) trackBacklog(key client.ObjectKey, conn *clustercache.Connection) error {
	if cs.Metrics == nil {
		return nil
	}
	// The informer the controller's watch uses; asking for it does not wait
	// for it to sync, and the backlog says nothing until it has.
	informer, err := conn.Cluster.GetCache().GetInformer(context.Background(), &certificatesv1.CertificateSigningRequest{},
		cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	clk := cs.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	untrack := cs.Metrics.trackBacklog(key, &backlogSource{reader: conn.Cluster.GetCache(), synced: informer.HasSynced, clock: clk})
	conn.Run(func(ctx context.Context) error {
		<-ctx.Done()
		untrack()
		return nil
	})
	return nil
}
