package kubeletcsr

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/csr"
	"github.com/carousel-dev/carousel/pkg/oldca"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// transientRetry is how soon a request left pending for a reason that may
// pass is looked at again, while it is young.
const transientRetry = 5 * time.Second

// maxTransientRetry bounds retryAfter.
const maxTransientRetry = 5 * time.Minute

// retryAfter is how soon a request left pending for a reason that may pass
// (a token or Node not in the cache yet) is looked at again, at age:
// transientRetry during a bootstrap, where that is a matter of seconds, then
// a twentieth of its age, up to maxTransientRetry. What it waits for may
// never come (a Node that never registers; a token gone since the kubelet
// used it deletes the request, deleteAbandoned), and the request stays
// pending for a day (csr.PendingLifetime): every 5 s, that was some 17,000
// looks.
func retryAfter(age time.Duration) time.Duration {
	return min(max(transientRetry, age/20), maxTransientRetry)
}

// csrReconciler approves, denies, signs and cleans up the kubelet CSRs of one
// managed cluster.
type csrReconciler struct {
	cluster client.ObjectKey // the Cluster in the management cluster
	remote  client.Client    // the managed cluster (cached)
	// informers are remote's: the first read of a Node or a Secret starts
	// theirs (listed). Nil starts none.
	informers   cache.Informers
	management  client.Reader // the management cluster (cached)
	clock       clock.PassiveClock
	maxDuration time.Duration
	metrics     *Metrics
	// recorder records each client certificate before it is posted; nil
	// records none.
	recorder *Recorder
	// approvedAt remembers when this process approved a CSR, for the
	// approval-to-signing latency (conditions only keep whole seconds): by
	// name, so that a CSR gone before it is signed takes its entry with it.
	approvedAt sync.Map // name -> approvalRecord
}

// approvalRecord is when this process approved the CSR of UID uid.
type approvalRecord struct {
	uid types.UID
	at  time.Time
}

func ours(signer string) bool {
	return signer == certificatesv1.KubeAPIServerClientKubeletSignerName || signer == certificatesv1.KubeletServingSignerName
}

// Reconcile handles one CSR: what it does is csr.Next's to say.
func (r *csrReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := &certificatesv1.CertificateSigningRequest{}
	if err := r.remote.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.approvedAt.Delete(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ours(obj.Spec.SignerName) {
		return ctrl.Result{}, nil
	}
	now := r.clock.Now()
	step := csr.Next(obj, now)
	switch step.Action {
	case csr.ActionDelete:
		// Only the request Next looked at: one that changed since (approved
		// at the last moment) comes back with its update event.
		err := r.remote.Delete(ctx, obj, client.Preconditions{UID: &obj.UID, ResourceVersion: &obj.ResourceVersion})
		if apierrors.IsConflict(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	case csr.ActionWait:
		return ctrl.Result{RequeueAfter: step.DeleteAt.Sub(now)}, nil
	}

	var cleanup ctrl.Result
	if !step.DeleteAt.IsZero() {
		cleanup.RequeueAfter = step.DeleteAt.Sub(now)
	}
	// A result returned with an error is ignored (controller-runtime retries
	// with backoff and warns about the result): the cleanup requeue goes
	// only with a nil error.
	c := &v1alpha1.Cluster{}
	if err := r.management.Get(ctx, r.cluster, c); err != nil {
		if apierrors.IsNotFound(err) {
			return cleanup, nil
		}
		return ctrl.Result{}, err
	}
	if step.Action == csr.ActionSign {
		return ctrl.Result{}, r.sign(ctx, c, obj)
	}
	retry, err := r.decide(ctx, c, obj)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case retry:
		return ctrl.Result{RequeueAfter: retryAfter(now.Sub(obj.CreationTimestamp.Time))}, nil
	}
	return cleanup, nil
}

// decide approves or denies a pending CSR, or deletes one made with a
// bootstrap token that is gone (deleteAbandoned). It returns true when the request
// was left pending for a reason that may pass (the decision's Retry is
// csr.RetrySoon: a token or Node not yet in the cache; or a pin written
// concurrently), so that it is looked at again soon, and an error when the
// decision needed a read that failed (csr.RetryWithBackoff).
func (r *csrReconciler) decide(ctx context.Context, c *v1alpha1.Cluster, obj *certificatesv1.CertificateSigningRequest) (bool, error) {
	approval := c.Spec.KubeletBootstrap.CSRApproval
	pins := pinStore{client: r.remote, cluster: c.Name}
	var pinErr error
	var pinObject *corev1.ConfigMap
	var read *nodeRead // the Node the decision read through the cache
	d := csr.Decide(obj, csr.Policy{
		BootstrapGroup:     bootstrap.Group(c.Name),
		IsCarouselToken:    func(id string) bool { return r.isCarouselToken(ctx, c, id) },
		AutoApproveClient:  approval.Client != v1alpha1.ApprovalManual,
		AutoApproveServing: approval.Serving == v1alpha1.ApprovalAuto,
		Node: func(node string) (csr.NodeInfo, bool) {
			info, ok := r.node(ctx, node)
			if ok {
				read = &nodeRead{name: node, info: info}
			}
			return info, ok
		},
		FirstSeenAddresses: approval.ServingAddresses == v1alpha1.ServingAddressesFirstSeen,
		Pinned: func(node string) (*csr.AddressPin, error) {
			var pin *csr.AddressPin
			pin, pinObject, pinErr = pins.get(ctx, node)
			return pin, pinErr
		},
	})
	if d.Retry == csr.RetryWithBackoff {
		return false, fmt.Errorf("reading the addresses pinned for the node of %s: %w", obj.Name, pinErr)
	}
	if d.UnknownToken != "" {
		switch gone, err := r.tokenGone(ctx, c, d.UnknownToken); {
		case err != nil:
			return false, fmt.Errorf("reading bootstrap token %s, which %s was made with: %w", d.UnknownToken, obj.Name, err)
		case gone:
			return false, r.deleteAbandoned(ctx, obj, d.UnknownToken)
		}
	}
	if d.Pin != nil {
		// A pin is decided once: not on a Node the cache shows behind the
		// API server (the kubelet asks for its serving certificate as soon as
		// it reports an address, before the Node's watch may show it).
		switch behind, err := r.cacheBehind(ctx, d.Pin.Node, csr.NodeInfo{UID: d.Pin.UID, Addresses: d.Pin.Addresses}); {
		case err != nil:
			return false, fmt.Errorf("reading node %s before pinning its addresses: %w", d.Pin.Node, err)
		case behind:
			return true, nil // decide again once the cache caught up
		}
		// Recorded before the verdict is: an approval never rests on
		// addresses that another evaluation could pin differently.
		if err := pins.put(ctx, d.Pin, pinObject); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
				return true, nil // pinned concurrently: decide again on that pin
			}
			return false, fmt.Errorf("pinning the addresses of node %s: %w", d.Pin.Node, err)
		}
	}
	if (d.Verdict == csr.Deny || d.Verdict == csr.Approve) && read != nil && d.Pin == nil {
		// Nor is a verdict written on a Node the cache shows behind (with a
		// pin, checked above): with servingAddresses NodeStatus, a serving
		// CSR naming an address the node has just reported would be denied,
		// for good, and one naming an address the node no longer has (moved
		// to another node) approved.
		switch behind, err := r.cacheBehind(ctx, read.name, read.info); {
		case err != nil:
			return false, fmt.Errorf("reading node %s before deciding %s: %w", read.name, obj.Name, err)
		case behind:
			return true, nil
		}
	}
	var condition certificatesv1.RequestConditionType
	switch d.Verdict {
	case csr.Approve:
		condition = certificatesv1.CertificateApproved
	case csr.Deny:
		condition = certificatesv1.CertificateDenied
	default:
		return d.Retry == csr.RetrySoon, nil
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
	// Counted once written: a write that conflicts is decided again. (One
	// that succeeded on the server but reached us as an error goes uncounted.)
	r.metrics.decided(c, obj.Spec.SignerName, d)
	if condition == certificatesv1.CertificateApproved {
		r.approvedAt.Store(obj.Name, approvalRecord{uid: obj.UID, at: r.clock.Now()})
	}
	return false, nil
}

// isCarouselToken reports whether token id is one Carousel issued for the
// cluster c and keeps: labelled for it, a token with an expiration, as
// Carousel writes them (one without never expires), and one the token
// reconciler keeps (bootstrap.Token.Kept): one it drops, valid for longer
// than the Cluster's tokenTTL, vouches for no kubelet even while its deletion
// fails (an admission policy refusing it, say).
func (r *csrReconciler) isCarouselToken(ctx context.Context, c *v1alpha1.Cluster, id string) bool {
	s := &corev1.Secret{}
	if !r.listed(ctx, s) {
		return false
	}
	if err := r.remote.Get(ctx, tokenKey(id), s); err != nil {
		return false
	}
	t, ok := clustersToken(c, s)
	return ok && t.Kept(c.Spec.KubeletBootstrap.TokenTTLOrDefault(), r.clock.Now())
}

// clustersToken is the token s holds when it is a bootstrap-token Secret
// labelled for c that the API server authenticates into c's token group
// (bootstrap.ParseTokenSecret).
func clustersToken(c *v1alpha1.Cluster, s *corev1.Secret) (bootstrap.Token, bool) {
	if s.Labels[v1alpha1.LabelBootstrapToken] != c.Name {
		return bootstrap.Token{}, false
	}
	t, err := bootstrap.ParseTokenSecret(c.Name, s)
	return t, err == nil
}

func tokenKey(id string) client.ObjectKey {
	return client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: bootstrapapi.BootstrapTokenSecretPrefix + id}
}

// tokenGone reports whether the API server, read past the cache, no longer
// authenticates token id of the Cluster's token group: deleted (as Carousel
// deletes a token once it expired), or labelled for c and expired. A request
// made with such a token is never approved, and it cannot be made again with
// a live one: the kubelet names its CSR after its key, its subject and its
// usages (k8s.io/kubernetes pkg/kubelet/certificate/bootstrap), and one that
// finds its name taken waits on the request there, however its bootstrap
// kubeconfig changed meanwhile. A token that is there and not expired is not
// gone, even one Carousel does not keep (valid for longer than the Cluster's
// tokenTTL: Carousel deletes it, and then it is gone; or not labelled for c,
// another tool's, whose requests are left to an administrator): the kubelet
// would make the same request again with it.
func (r *csrReconciler) tokenGone(ctx context.Context, c *v1alpha1.Cluster, id string) (bool, error) {
	s := &corev1.Secret{}
	if err := getPastCache(ctx, r.remote, tokenKey(id), s); err != nil {
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}
	t, ok := clustersToken(c, s)
	return ok && !r.clock.Now().Before(t.Expires), nil
}

// deleteAbandoned deletes obj, a pending request made with a bootstrap token
// that is gone (tokenGone), as Carousel last read it: the kubelet that made it
// fails its wait, and when it starts again it makes the request anew with the
// token its bootstrap kubeconfig holds then. Left pending, the request would
// hold the node for the day it is kept (csr.PendingLifetime).
func (r *csrReconciler) deleteAbandoned(ctx context.Context, obj *certificatesv1.CertificateSigningRequest, tokenID string) error {
	err := r.remote.Delete(ctx, obj, client.Preconditions{UID: &obj.UID, ResourceVersion: &obj.ResourceVersion})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // changed or gone since: its event brings it back, if need be
	}
	if err != nil {
		return fmt.Errorf("deleting %s, made with bootstrap token %s, which is gone: %w", obj.Name, tokenID, err)
	}
	log.FromContext(ctx).Info("deleted a kubelet CSR made with a bootstrap token that is gone: the kubelet asks again with the token of its bootstrap kubeconfig",
		"csr", obj.Name, "token", tokenID)
	return nil
}

// listed starts, on the first request that reads them, the informer of the
// kind of obj in the managed cluster (bootstrap-token Secrets, which only
// requests made with a token read; Nodes, which only serving requests read,
// none when they are approved by hand, the default), and says whether it is
// listed. Until it is, the object reads as not there yet, which leaves the
// request pending for a moment (csr.RetrySoon) rather than holding a worker,
// which every managed cluster shares, while they are listed; a connection
// whose cluster has no such requests watches none.
func (r *csrReconciler) listed(ctx context.Context, obj client.Object) bool {
	if r.informers == nil {
		return true
	}
	informer, err := r.informers.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	return err == nil && informer.HasSynced()
}

func (r *csrReconciler) node(ctx context.Context, name string) (csr.NodeInfo, bool) {
	if !r.listed(ctx, &corev1.Node{}) {
		return csr.NodeInfo{}, false
	}
	node := &corev1.Node{}
	if err := r.remote.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return csr.NodeInfo{}, false
	}
	return nodeInfo(node), true
}

// latestNode reads a Node past the connection's cache; a Node that is gone
// has no UID and no addresses.
func (r *csrReconciler) latestNode(ctx context.Context, name string) (csr.NodeInfo, error) {
	node := &corev1.Node{}
	if err := getPastCache(ctx, r.remote, client.ObjectKey{Name: name}, node); err != nil {
		return csr.NodeInfo{}, client.IgnoreNotFound(err)
	}
	return nodeInfo(node), nil
}

// nodeRead is a Node a decision read through the connection's cache.
type nodeRead struct {
	name string
	info csr.NodeInfo
}

// cacheBehind reports whether the API server has node otherwise than a
// decision read it (cached): another UID (deleted, or registered again) or
// other addresses.
func (r *csrReconciler) cacheBehind(ctx context.Context, node string, cached csr.NodeInfo) (bool, error) {
	latest, err := r.latestNode(ctx, node)
	if err != nil {
		return false, err
	}
	return latest.UID != cached.UID || !slices.Equal(latest.Addresses, cached.Addresses), nil
}

// nodeInfo is what a decision reads of node.
func nodeInfo(node *corev1.Node) csr.NodeInfo {
	info := csr.NodeInfo{UID: string(node.UID)}
	for _, a := range node.Status.Addresses {
		info.Addresses = append(info.Addresses, a.Address)
	}
	return info
}

// withCondition is conditions with c in place of the one of its type, or
// added: the API server refuses a second condition of a type (an approved
// request may carry a Failed condition that is False, which is no failure).
func withCondition(conditions []certificatesv1.CertificateSigningRequestCondition,
	c certificatesv1.CertificateSigningRequestCondition) []certificatesv1.CertificateSigningRequestCondition {
	for i := range conditions {
		if conditions[i].Type == c.Type {
			conditions[i] = c
			return conditions
		}
	}
	return append(conditions, c)
}

// signingFailedMessage is the message of the Failed condition, written into
// the managed cluster: it names the request's problem and nothing of the
// management cluster.
const signingFailedMessage = "Carousel does not sign this request for its signer: "

// sign issues the certificate of an approved CSR. Only a request the signer
// refuses (csr.RefusedError) is marked Failed, for good. Any other problem
// (the CA cannot be read from the management cluster, a cache not synced, an
// expired CA) is the operator's, not the request's: it is returned, logged
// here with its detail, and retried with backoff, and the kubelet keeps
// waiting; the request is never deleted while approved and unsigned.
func (r *csrReconciler) sign(ctx context.Context, c *v1alpha1.Cluster, obj *certificatesv1.CertificateSigningRequest) error {
	var cert []byte
	ca, err := r.signingCA(ctx, c, obj.Spec.SignerName)
	if err == nil {
		cert, err = csr.Sign(obj, ca, r.maxDuration, r.clock.Now())
	}
	if err == nil {
		err = r.record(ctx, c, obj.Spec.SignerName, cert, ca)
	}
	var refused *csr.RefusedError
	switch {
	case errors.As(err, &refused):
		log.FromContext(ctx).Info("marking an approved kubelet CSR Failed: its signer does not issue what it asks for",
			"csr", obj.Name, "signer", obj.Spec.SignerName, "reason", refused.Reason, "detail", refused.Message)
		r.metrics.failed(c, obj.Spec.SignerName)
		obj.Status.Conditions = withCondition(obj.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateFailed, Status: corev1.ConditionTrue, Reason: "CarouselSigningFailed",
			Message:        signingFailedMessage + refused.Error(),
			LastUpdateTime: metav1.NewTime(r.clock.Now()), LastTransitionTime: metav1.NewTime(r.clock.Now()),
		})
	case err != nil:
		r.metrics.signingError(c, obj.Spec.SignerName)
		return fmt.Errorf("signing %s (retrying): %w", obj.Name, err)
	default:
		obj.Status.Certificate = cert
	}
	if err := r.remote.Status().Update(ctx, obj); err != nil {
		if apierrors.IsConflict(err) {
			return nil // the CSR changed; its update event brings it back
		}
		return fmt.Errorf("recording the certificate of %s: %w", obj.Name, err)
	}
	approved, _ := r.approvedAt.LoadAndDelete(obj.Name)
	if len(obj.Status.Certificate) > 0 {
		var at time.Time
		if a, ok := approved.(approvalRecord); ok && a.uid == obj.UID {
			at = a.at
		}
		r.metrics.signed(c, obj, at, r.clock.Now())
	}
	return nil
}

// record has the recorder record a certificate before it is posted, with
// the CA that signed it: a client certificate for the old-CA usage gate and
// an abort, which keeps the new client CA while a kubelet holds one from it;
// a serving certificate for an abort, which keeps the new kubelet CA while a
// kubelet serves one from it (the API server would not verify that kubelet).
func (r *csrReconciler) record(ctx context.Context, c *v1alpha1.Cluster, signer string, certPEM []byte, ca *pki.KeyPair) error {
	if r.recorder == nil {
		return nil
	}
	certs, err := pki.ParseCertificates(certPEM)
	if err != nil {
		return err
	}
	cert := certs[0]
	err = r.recorder.Record(ctx, c, oldca.IssuedCertificate{User: cert.Subject.CommonName, Fingerprint: pki.Fingerprint(cert),
		Issuer: hex.EncodeToString(ca.Cert.SubjectKeyId), IssuedAt: r.clock.Now().UTC(), NotAfter: cert.NotAfter.UTC(),
		Serving: signer == certificatesv1.KubeletServingSignerName})
	if err != nil {
		return fmt.Errorf("recording the certificate in the kubelet record: %w", err)
	}
	return nil
}

// signingCA is the CA that signs a kubelet CSR now. Client certificates come
// from the client CA that signed Carousel's own client certificate: during a
// rotation that moves to the new CA exactly when the API server has rolled
// out trusting it, so a kubelet never gets a certificate its API server
// rejects. Serving certificates move to the new kubelet CA at the same
// moment: the rollout that made the API server trust the new client CA gave
// it, and every other caller of kubelets in the control plane, the kubelet
// bundle with both kubelet CAs. Kubelets renewed in Preparing therefore
// serve from the new kubelet CA before Finalizing drops the old one from
// that bundle, and API server -> kubelet calls never fail on the way. An
// abort signs both from the CAs of before the rotation
// (credentials.CAs.BeforeRotation), which the API server and every caller
// of kubelets trust throughout: never from a CA it is about to delete, not
// even while Carousel's own client certificate is still on the new client
// CA.
func (r *csrReconciler) signingCA(ctx context.Context, c *v1alpha1.Cluster, signer string) (*pki.KeyPair, error) {
	clientCAs, inUse, err := credentials.ClientCAInUse(ctx, r.management, c)
	if err != nil {
		return nil, err
	}
	aborting := c.CARotationPhase() == v1alpha1.RotationAborting
	if signer != certificatesv1.KubeletServingSignerName {
		if aborting {
			return clientCAs.BeforeRotation(), nil
		}
		return inUse, nil
	}
	kubeletCAs, err := credentials.ReadCAs(ctx, r.management, c, v1alpha1.CARoleKubelet)
	switch {
	case err != nil:
		return nil, err
	case aborting:
		return kubeletCAs.BeforeRotation(), nil
	case inUse == clientCAs.Current || kubeletCAs.Previous == nil:
		return kubeletCAs.Current, nil
	}
	return kubeletCAs.Previous, nil
}
