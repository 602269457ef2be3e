package managed

import (
	"context"
	"fmt"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/csr"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// How long CSRs are kept, like kube-controller-manager's csrcleaner: decided
// or issued ones for an hour, pending ones for a day.
const (
	decidedCSRLifetime = time.Hour
	pendingCSRLifetime = 24 * time.Hour
	// transientRetry is how soon a request left pending for a reason that
	// may pass is looked at again.
	transientRetry = 5 * time.Second
)

// csrReconciler approves, denies, signs and cleans up the kubelet CSRs of one
// managed cluster.
type csrReconciler struct {
	cluster     client.ObjectKey // the Cluster in the management cluster
	remote      client.Client    // the managed cluster (cached)
	management  client.Reader    // the management cluster (cached)
	clock       clock.PassiveClock
	maxDuration time.Duration
	metrics     *Metrics
	// approvedAt remembers when this process approved a CSR (by UID), for
	// the approval-to-signing latency: conditions only keep whole seconds.
	approvedAt sync.Map
}

func ours(signer string) bool {
	return signer == certificatesv1.KubeAPIServerClientKubeletSignerName || signer == certificatesv1.KubeletServingSignerName
}

// Reconcile handles one CSR.
func (r *csrReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := &certificatesv1.CertificateSigningRequest{}
	if err := r.remote.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ours(obj.Spec.SignerName) {
		return ctrl.Result{}, nil
	}
	now := r.clock.Now()
	age := now.Sub(obj.CreationTimestamp.Time)
	decided := decidedOrIssued(obj)
	if lifetime := cleanupAfter(decided); age >= lifetime {
		return ctrl.Result{}, client.IgnoreNotFound(r.remote.Delete(ctx, obj))
	}
	cleanup := ctrl.Result{RequeueAfter: cleanupAfter(decided) - age}

	c := &v1alpha1.Cluster{}
	if err := r.management.Get(ctx, r.cluster, c); err != nil {
		return cleanup, client.IgnoreNotFound(err)
	}
	switch {
	case !decided:
		retry, err := r.decide(ctx, c, obj)
		if retry {
			return ctrl.Result{RequeueAfter: transientRetry}, err
		}
		return cleanup, err
	case csr.Approved(obj) && len(obj.Status.Certificate) == 0:
		return cleanup, r.sign(ctx, c, obj)
	}
	return cleanup, nil
}

func decidedOrIssued(obj *certificatesv1.CertificateSigningRequest) bool {
	return len(obj.Status.Conditions) > 0 || len(obj.Status.Certificate) > 0
}

func cleanupAfter(decided bool) time.Duration {
	if decided {
		return decidedCSRLifetime
	}
	return pendingCSRLifetime
}

// decide approves or denies a pending CSR. It returns true when the request
// was left pending for a reason that may pass (a token or Node not yet in the
// cache), so that it is looked at again soon.
func (r *csrReconciler) decide(ctx context.Context, c *v1alpha1.Cluster, obj *certificatesv1.CertificateSigningRequest) (bool, error) {
	approval := c.Spec.KubeletBootstrap.CSRApproval
	d := csr.Decide(obj, csr.Policy{
		BootstrapGroup:     bootstrap.Group(c.Name),
		IsCarouselToken:    func(id string) bool { return r.isCarouselToken(ctx, c.Name, id) },
		AutoApproveClient:  approval.Client != v1alpha1.ApprovalManual,
		AutoApproveServing: approval.Serving == v1alpha1.ApprovalAuto,
		NodeAddresses:      func(node string) ([]string, bool) { return r.nodeAddresses(ctx, node) },
	})
	r.metrics.decided(c, obj.Spec.SignerName, d)
	var condition certificatesv1.RequestConditionType
	switch d.Verdict {
	case csr.Approve:
		condition = certificatesv1.CertificateApproved
	case csr.Deny:
		condition = certificatesv1.CertificateDenied
	default:
		return d.Reason == csr.ReasonForeignToken || d.Reason == csr.ReasonUnknownNode, nil
	}
	obj.Status.Conditions = append(obj.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: condition, Status: corev1.ConditionTrue, Reason: d.Reason, Message: d.Message,
		LastUpdateTime: metav1.NewTime(r.clock.Now()), LastTransitionTime: metav1.NewTime(r.clock.Now()),
	})
	if err := r.remote.SubResource("approval").Update(ctx, obj); err != nil {
		if apierrors.IsConflict(err) {
			return false, nil // the CSR changed; its update event brings it back
		}
		return false, fmt.Errorf("recording %s on %s: %w", condition, obj.Name, err)
	}
	if condition == certificatesv1.CertificateApproved {
		r.approvedAt.Store(obj.UID, r.clock.Now())
	}
	return false, nil
}

func (r *csrReconciler) isCarouselToken(ctx context.Context, cluster, id string) bool {
	s := &corev1.Secret{}
	err := r.remote.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-" + id}, s)
	return err == nil && s.Labels[bootstrap.LabelToken] == cluster
}

func (r *csrReconciler) nodeAddresses(ctx context.Context, name string) ([]string, bool) {
	node := &corev1.Node{}
	if err := r.remote.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return nil, false
	}
	var out []string
	for _, a := range node.Status.Addresses {
		out = append(out, a.Address)
	}
	return out, true
}

// sign issues the certificate of an approved CSR, or marks it Failed.
func (r *csrReconciler) sign(ctx context.Context, c *v1alpha1.Cluster, obj *certificatesv1.CertificateSigningRequest) error {
	ca, err := r.signingCA(ctx, c, obj.Spec.SignerName)
	var cert []byte
	if err == nil {
		cert, err = csr.Sign(obj, ca, r.maxDuration, r.clock.Now())
	}
	if err != nil {
		r.metrics.failed(c, obj.Spec.SignerName)
		obj.Status.Conditions = append(obj.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateFailed, Status: corev1.ConditionTrue, Reason: "CarouselSigningFailed", Message: err.Error(),
			LastUpdateTime: metav1.NewTime(r.clock.Now()), LastTransitionTime: metav1.NewTime(r.clock.Now()),
		})
	} else {
		obj.Status.Certificate = cert
	}
	if err := r.remote.Status().Update(ctx, obj); err != nil {
		if apierrors.IsConflict(err) {
			return nil // the CSR changed; its update event brings it back
		}
		return fmt.Errorf("recording the certificate of %s: %w", obj.Name, err)
	}
	approvedAt, _ := r.approvedAt.LoadAndDelete(obj.UID)
	if len(obj.Status.Certificate) > 0 {
		at, _ := approvedAt.(time.Time)
		r.metrics.signed(c, obj, at, r.clock.Now())
	}
	return nil
}

// signingCA is the CA that signs a kubelet CSR now. Client certificates come
// from the client CA that signed Carousel's own client certificate: during a
// rotation that moves to the new CA exactly when the API server has rolled
// out trusting it, so a kubelet never gets a certificate its API server
// rejects. Serving certificates follow the API server's kubelet client
// certificate, which moves to the new kubelet CA in Finalizing.
func (r *csrReconciler) signingCA(ctx context.Context, c *v1alpha1.Cluster, signer string) (*pki.KeyPair, error) {
	role, follow := v1alpha1.CARoleClient, credentials.CertOperator
	if signer == certificatesv1.KubeletServingSignerName {
		role, follow = v1alpha1.CARoleKubelet, credentials.CertKubeAPIServerKubelet
	}
	caSecret := &corev1.Secret{}
	if err := r.management.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.CASecretName(c.Name, role)}, caSecret); err != nil {
		return nil, fmt.Errorf("reading the %s CA: %w", role, err)
	}
	cas, err := credentials.DecodeCASecret(caSecret)
	if err != nil {
		return nil, err
	}
	leafSecret := &corev1.Secret{}
	if err := r.management.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.CertificateSecretName(c.Name, follow)}, leafSecret); err != nil {
		return nil, fmt.Errorf("reading %s: %w", follow, err)
	}
	certs, err := pki.ParseCertificates(leafSecret.Data[v1alpha1.DataKeyCertificate])
	if err != nil {
		return nil, err
	}
	return cas.IssuerOf(certs[0]), nil
}
