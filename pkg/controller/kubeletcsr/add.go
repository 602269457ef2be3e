// Package kubeletcsr approves, denies, signs and cleans up the kubelet CSRs of
// every managed cluster Carousel is connected to: one controller per
// connection, started by the clustercache when it connects and stopped with
// the connection. What it decides is package csr's to say.
package kubeletcsr

import (
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
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
	Metrics     *Metrics
}

// OnConnect is a clustercache.OnConnect: it starts the CSR controller of the
// managed cluster of the Cluster key on conn.
func (cs *Controllers) OnConnect(key client.ObjectKey, conn *clustercache.Connection) error {
	c, err := controller.NewUnmanaged("kubelet-csr-"+key.Namespace+"-"+key.Name, controller.Options{
		Reconciler: &csrReconciler{cluster: key, remote: conn.Cluster.GetClient(), management: cs.Management, clock: cs.Clock,
			maxDuration: cs.MaxDuration, metrics: cs.Metrics},
		MaxConcurrentReconciles: 4,
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
	return nil
}
