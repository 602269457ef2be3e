// Package kubeletbootstrap keeps, in each managed cluster whose API server
// Carousel can reach, the objects of kubelet TLS bootstrapping (bootstrap
// tokens, RBAC, signed cluster-info, the node trust ConfigMap), publishes the
// bootstrap kubeconfig in the management cluster, and removes them when the
// Cluster is deleted. It also keeps the Cluster's connection in the
// clustercache current: it is the controller that looks at every reachable
// Cluster at least once a minute.
package kubeletbootstrap

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/clustercache"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
	"github.com/carousel-dev/carousel/pkg/refused"
)

// Reconciler reconciles the bootstrap objects of Clusters' managed clusters.
type Reconciler struct {
	Client client.Client // the management cluster
	// APIReader reads the management cluster past the cache, which shows
	// only the Secrets labelled with a Cluster: what holds the bootstrap
	// kubeconfig's name when the cache shows nothing there. Nil reads
	// nothing: such a pass fails with the create's error alone.
	APIReader client.Reader
	Clock     clock.PassiveClock
	// Connections reach the managed clusters (a *clustercache.Cache).
	Connections Connections
	// Recorder records events on Clusters; nil records none.
	Recorder events.EventRecorder
	// CleanupTimeout bounds how long a deleted Cluster waits for its managed
	// cluster to be cleaned up; zero means DefaultCleanupTimeout.
	CleanupTimeout time.Duration
	// Concurrency is how many Clusters are reconciled at once: a managed
	// API server slow to answer holds one worker, not the others' upkeep.
	// Zero means one.
	Concurrency int

	failedCleanups failedCleanups
}

// Connections are the connections to managed clusters the Reconciler
// makes, uses and ends.
type Connections interface {
	Connect(context.Context, *v1alpha1.Cluster) (*clustercache.Connection, error)
	Connection(client.ObjectKey) (*clustercache.Connection, bool)
	Disconnect(client.ObjectKey)
}

// Reconcile brings one managed cluster's bootstrap objects up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &v1alpha1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		if apierrors.IsNotFound(err) {
			r.Connections.Disconnect(req.NamespacedName)
			r.failedCleanups.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !c.DeletionTimestamp.IsZero() || c.Spec.ControlPlane.Endpoint == "" {
		// Deleted, or its endpoint cleared: Carousel no longer manages the
		// managed cluster's bootstrap.
		return r.finalize(ctx, c)
	}
	// The cleanups of an endpoint cleared before count from naught when it
	// is cleared again.
	r.failedCleanups.forget(client.ObjectKeyFromObject(c))
	conn, err := r.Connections.Connect(ctx, c)
	if errors.Is(err, clustercache.ErrNotIssued) {
		// Issued by the Cluster controller; its creation event brings us back.
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	// Before this pass writes anything there, so that a deleted Cluster
	// cleans up; not before it was reached, when nothing can have been, so
	// that a Cluster never connected is released at once. (The kubelet CSR
	// controller, which the connect started, may pin a node's serving
	// addresses before the finalizer is on: a Cluster deleted in between
	// leaves those ConfigMaps, which also go with their Nodes.)
	if err := r.ensureFinalizer(ctx, c); err != nil {
		return ctrl.Result{}, err
	}
	bundles, err := r.bundles(ctx, c)
	if errors.Is(err, clustercache.ErrNotIssued) {
		// Likewise.
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}

	// A write the managed cluster refuses (refused.Is: an admission policy
	// against bindings to system:anonymous, say) holds up only what comes
	// after it and needs it: a refused binding holds up nothing, nor does a
	// refused deletion of an old token (ensureTokens); the tokens and their
	// signatures in cluster-info hold up the kubeconfig that hands one out,
	// and so does the node trust ConfigMap, written before it as ever. Any
	// other error (the API server slow or down) ends the pass, as the next
	// request would most likely fail the same way.
	var refusals []error
	// stop keeps a refusal and goes on; any other error ends the pass, with
	// the refusals before it.
	stop := func(err error) error {
		if err != nil && !refused.Is(err) {
			return errors.Join(append(refusals, err)...)
		}
		if err != nil {
			refusals = append(refusals, err)
		}
		return nil
	}
	autoApprove := c.Spec.KubeletBootstrap.CSRApproval.Client != v1alpha1.ApprovalManual
	rbac := bootstrap.RBAC(c.Name)
	if autoApprove {
		rbac = append(rbac, bootstrap.AutoApproveBindings(c.Name)...)
	}
	for _, obj := range rbac {
		if err := stop(ensure(ctx, conn.Client, obj)); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !autoApprove {
		for _, obj := range bootstrap.AutoApproveBindings(c.Name) {
			if err := stop(remove(ctx, conn.Client, obj)); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	tokens, next, deletesRefused, tokensErr := r.signTokens(ctx, c, conn.Client, bundles.cluster)
	if deletesRefused != nil {
		refusals = append(refusals, deletesRefused)
	}
	if err := stop(tokensErr); err != nil {
		return ctrl.Result{}, err
	}
	nodeTrust, trustErr := credentials.NodeTrust(ctx, r.Client, c, noderenewal.Trust{Cluster: bundles.cluster, Kubelet: bundles.kubelet})
	if trustErr == nil {
		trustErr = ensure(ctx, conn.Client, bootstrap.NodeTrust(nodeTrust.Cluster, nodeTrust.Kubelet))
	}
	if err := stop(trustErr); err != nil {
		return ctrl.Result{}, err
	}
	if tokens != nil && trustErr == nil {
		if err := stop(r.publishKubeconfig(ctx, c, bundles.cluster, tokens)); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := errors.Join(refusals...); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: lookAgainIn(next, r.Clock.Now())}, nil
}

// signTokens issues the bootstrap tokens (ensureTokens) and signs them in
// cluster-info, before any is handed out. It returns the live tokens, nil
// unless they are signed, when they need looking at again, and, apart from
// any other error, the deletions of tokens the managed cluster refused.
func (r *Reconciler) signTokens(ctx context.Context, c *v1alpha1.Cluster, remote client.Client, clusterBundle []byte) (
	tokens []bootstrap.Token, next time.Time, deletesRefused, err error) {
	tokens, next, deletesRefused, err = r.ensureTokens(ctx, c, remote)
	if err != nil {
		return nil, time.Time{}, deletesRefused, err
	}
	info, err := bootstrap.ClusterInfo(c.Spec.ControlPlane.Endpoint, clusterBundle, tokens)
	if err == nil {
		err = ensure(ctx, remote, info)
	}
	if err != nil {
		return nil, time.Time{}, deletesRefused, err
	}
	return tokens, next, deletesRefused, nil
}

// lookAgainIn is how long until the pass after one that found the next
// token due at next: then, and at least every minute to reconnect a dropped
// connection (the managed cluster raises no events here). Never less than a
// second: controller-runtime takes a RequeueAfter that is not positive for
// no requeue at all, which a pass that outlasted next would have asked for,
// and no token would then be made until something else changed.
func lookAgainIn(next, now time.Time) time.Duration {
	return max(min(next.Sub(now), time.Minute), time.Second)
}

// trustBundles are the Cluster's trust bundles that Carousel publishes in the
// managed cluster.
type trustBundles struct{ cluster, kubelet []byte }

// bundles reads the cluster and kubelet CA bundles from their ConfigMaps in
// the management cluster (labelled with the Cluster: their changes bring the
// Cluster back here). A bundle not issued yet is clustercache.ErrNotIssued.
func (r *Reconciler) bundles(ctx context.Context, c *v1alpha1.Cluster) (trustBundles, error) {
	read := func(role v1alpha1.CARole) ([]byte, error) {
		cm := &corev1.ConfigMap{}
		key := client.ObjectKey{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, role)}
		if err := r.Client.Get(ctx, key, cm); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, clustercache.ErrNotIssued
			}
			return nil, fmt.Errorf("reading the %s CA bundle: %w", role, err)
		}
		bundle := cm.Data[v1alpha1.DataKeyCABundle]
		if bundle == "" {
			return nil, fmt.Errorf("ConfigMap %s has no %s", key.Name, v1alpha1.DataKeyCABundle)
		}
		return []byte(bundle), nil
	}
	var b trustBundles
	var err error
	if b.cluster, err = read(v1alpha1.CARoleCluster); err != nil {
		return b, err
	}
	b.kubelet, err = read(v1alpha1.CARoleKubelet)
	return b, err
}

// ensureTokens deletes expired bootstrap tokens, those valid for longer than
// the Cluster's token TTL (bootstrap.TokenPlan), and those labelled as the
// Cluster's that do not parse, and issues a new one when none has a third of
// its life left. It returns the live tokens and when they need looking at
// again. A token Secret without a readable expiration never expires for the
// API server, and the CSR approver would take it for one of Carousel's: it
// must not stay. A deletion the managed cluster refuses (an admission policy
// on kube-system's Secrets, say) is returned in deletesRefused and holds up
// nothing: the token it leaves is not handed out, and new nodes still need
// one.
func (r *Reconciler) ensureTokens(ctx context.Context, c *v1alpha1.Cluster, remote client.Client) (tokens []bootstrap.Token, next time.Time, deletesRefused, err error) {
	var refusals []error
	// deleted keeps a refused deletion; any other error is returned.
	deleted := func(err error) error {
		if refused.Is(err) {
			refusals = append(refusals, err)
			return nil
		}
		return client.IgnoreNotFound(err)
	}
	var secrets corev1.SecretList
	if err := remote.List(ctx, &secrets, client.InNamespace(metav1.NamespaceSystem), client.MatchingLabels{v1alpha1.LabelBootstrapToken: c.Name}); err != nil {
		return nil, time.Time{}, nil, fmt.Errorf("listing bootstrap tokens: %w", err)
	}
	uids := map[string]types.UID{}
	for i := range secrets.Items {
		s := &secrets.Items[i]
		if s.DeletionTimestamp != nil {
			continue // going (a finalizer holds it): no token, and deleted already
		}
		t, err := bootstrap.ParseTokenSecret(c.Name, s)
		if err == nil {
			tokens = append(tokens, t)
			uids[t.ID] = s.UID
			continue
		}
		log.FromContext(ctx).Info("Deleting a Secret labelled as a bootstrap token of the Cluster's that holds no valid one (without a readable expiration it would never expire)", "secret", s.Name, "reason", err.Error())
		if err := deleted(remote.Delete(ctx, s, client.Preconditions{UID: &s.UID})); err != nil {
			return nil, time.Time{}, errors.Join(refusals...), fmt.Errorf("deleting bootstrap token Secret %s, which does not parse: %w", s.Name, err)
		}
	}
	now, ttl := r.Clock.Now(), c.Spec.KubeletBootstrap.TokenTTLOrDefault()
	keep, drop, create := bootstrap.TokenPlan(tokens, ttl, now)
	for _, t := range drop {
		if now.Before(t.Expires) {
			log.FromContext(ctx).Info("Deleting a bootstrap token valid for longer than the Cluster's token TTL", "token", t.ID, "expires", t.Expires, "ttl", ttl)
		}
		uid := uids[t.ID] // the Secret listed, not one made since under its name
		if err := deleted(remote.Delete(ctx, bootstrap.TokenSecret(c.Name, t), client.Preconditions{UID: &uid})); err != nil {
			return nil, time.Time{}, errors.Join(refusals...), fmt.Errorf("deleting bootstrap token %s (expired, or valid for longer than the token TTL): %w", t.ID, err)
		}
	}
	if create {
		t, err := bootstrap.NewToken(ttl, now)
		if err != nil {
			return nil, time.Time{}, errors.Join(refusals...), err
		}
		if err := remote.Create(ctx, bootstrap.TokenSecret(c.Name, t)); err != nil {
			return nil, time.Time{}, errors.Join(refusals...), fmt.Errorf("creating a bootstrap token: %w", err)
		}
		keep = append(keep, t)
	}
	newest, _ := bootstrap.Newest(keep, now)
	return keep, newest.Expires.Add(-ttl / 3), errors.Join(refusals...), nil
}

// publishKubeconfig writes the bootstrap kubeconfig with the newest token
// into the management cluster.
func (r *Reconciler) publishKubeconfig(ctx context.Context, c *v1alpha1.Cluster, caBundle []byte, tokens []bootstrap.Token) error {
	newest, _ := bootstrap.Newest(tokens, r.Clock.Now())
	kubeconfig, err := bootstrap.Kubeconfig(c.Spec.ControlPlane.Endpoint, caBundle, newest)
	if err != nil {
		return err
	}
	published := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.BootstrapKubeconfigSecretName(c.Name),
		Labels: map[string]string{v1alpha1.LabelCluster: c.Name}}, Data: map[string][]byte{v1alpha1.DataKeyKubeconfig: kubeconfig}}
	if err := ctrl.SetControllerReference(c, published, r.Client.Scheme()); err != nil {
		return err
	}
	// The cache shows every Secret with the label, another Cluster's too:
	// such a one is not taken over.
	existing := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(published), existing); err == nil && existing.Labels[v1alpha1.LabelCluster] != c.Name {
		return r.kubeconfigNameHeld(c, existing)
	}
	err = ensure(ctx, r.Client, published)
	if apierrors.IsAlreadyExists(err) {
		return r.kubeconfigNameTaken(ctx, c, published.Name)
	}
	return err
}

// kubeconfigNameTaken says why the bootstrap kubeconfig Secret, which the
// cache does not show, could not be created: the cache has not seen it yet
// (the next pass finds it), or it lacks the Cluster's label, which the cache
// filters on (kubeconfigNameHeld).
func (r *Reconciler) kubeconfigNameTaken(ctx context.Context, c *v1alpha1.Cluster, name string) error {
	if r.APIReader == nil {
		return fmt.Errorf("creating secret %s: its name is taken by a Secret the cache does not show", name)
	}
	found := &metav1.PartialObjectMetadata{}
	found.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, found)
	switch {
	case apierrors.IsNotFound(err), err == nil && found.Labels[v1alpha1.LabelCluster] == c.Name:
		return fmt.Errorf("creating secret %s: the cache is behind the API server; retrying", name)
	case err != nil:
		return fmt.Errorf("creating secret %s, whose name is taken: reading what holds it: %w", name, err)
	}
	return r.kubeconfigNameHeld(c, found)
}

// kubeconfigNameHeld reports a Secret that holds the name of c's bootstrap
// kubeconfig without c's label: one that lost it, which Carousel would never
// see or update (new nodes would start with an expired token), or one
// another Cluster's label claims. Carousel takes neither over: a Warning
// event names it and what to do.
func (r *Reconciler) kubeconfigNameHeld(c *v1alpha1.Cluster, held metav1.Object) error {
	why := fmt.Sprintf("lacks the label %s=%s", v1alpha1.LabelCluster, c.Name)
	if other := held.GetLabels()[v1alpha1.LabelCluster]; other != "" {
		why = fmt.Sprintf("is labelled for Cluster %s (%s=%s)", other, v1alpha1.LabelCluster, other)
	}
	r.event(c, corev1.EventTypeWarning, v1alpha1.EventBootstrapKubeconfigNotWritten, "Publish",
		"Secret %s, under the name of this Cluster's bootstrap kubeconfig, %s, so Carousel does not write it, and new nodes that start with it will fail once its token expires: if it is this Cluster's, put the label back (kubectl label --overwrite secret -n %s %s %s=%s); otherwise move it out of the way",
		held.GetName(), why, c.Namespace, held.GetName(), v1alpha1.LabelCluster, c.Name)
	return fmt.Errorf("secret %s holds the bootstrap kubeconfig's name and %s", held.GetName(), why)
}

func (r *Reconciler) event(c *v1alpha1.Cluster, eventType, reason, action, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(c, nil, eventType, reason, action, format, args...)
	}
}

// ensure creates obj, or lays it over the existing object (merged) and
// updates that when anything changed.
func ensure(ctx context.Context, c client.Client, obj client.Object) error {
	existing := obj.DeepCopyObject().(client.Object)
	err := c.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
		return nil
	case err != nil:
		return err
	case otherRole(existing, obj):
		// A binding's roleRef cannot change: one of this name bound to
		// another role (an older release's, or a name taken by someone
		// else) is made again, or every pass would fail here, and with it
		// the tokens and cluster-info after it.
		bound, _ := roleRef(existing)
		log.FromContext(ctx).Info("replacing a binding bound to another role", "kind", fmt.Sprintf("%T", obj), "name", obj.GetName(),
			"roleRef", bound.Kind+"/"+bound.Name)
		if err := c.Delete(ctx, existing, client.Preconditions{UID: ptr.To(existing.GetUID())}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %T %s, bound to another role: %w", obj, obj.GetName(), err)
		}
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
		return nil
	}
	updated := merged(existing, obj)
	if equality.Semantic.DeepEqual(updated, existing) {
		return nil
	}
	if err := c.Update(ctx, updated); err != nil {
		return fmt.Errorf("updating %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// remove deletes obj, as it is there (a UID precondition), unless it is not
// there.
func remove(ctx context.Context, c client.Client, obj client.Object) error {
	existing := obj.DeepCopyObject().(client.Object)
	err := c.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	if err == nil {
		err = c.Delete(ctx, existing, client.Preconditions{UID: ptr.To(existing.GetUID())})
	}
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// otherRole says whether have, a binding, is bound to another role than want.
func otherRole(have, want client.Object) bool {
	ref, binding := roleRef(have)
	wanted, _ := roleRef(want)
	return binding && ref != wanted
}

// roleRef is the role obj binds, and whether it is a binding.
func roleRef(obj client.Object) (rbacv1.RoleRef, bool) {
	switch b := obj.(type) {
	case *rbacv1.ClusterRoleBinding:
		return b.RoleRef, true
	case *rbacv1.RoleBinding:
		return b.RoleRef, true
	}
	return rbacv1.RoleRef{}, false
}

// merged is have with what ensure manages of want laid over it: want's
// content of each kind, its labels and annotations, and its owner references
// (its controller reference in place of another). What others put on the
// object stays: their labels, annotations, finalizers and owner references,
// which replacing the object whole dropped.
func merged(have, want client.Object) client.Object {
	out := have.DeepCopyObject().(client.Object)
	switch w := want.(type) {
	case *rbacv1.ClusterRoleBinding:
		o := out.(*rbacv1.ClusterRoleBinding)
		o.RoleRef, o.Subjects = w.RoleRef, w.Subjects
	case *rbacv1.RoleBinding:
		o := out.(*rbacv1.RoleBinding)
		o.RoleRef, o.Subjects = w.RoleRef, w.Subjects
	case *rbacv1.Role:
		out.(*rbacv1.Role).Rules = w.Rules
	case *corev1.ConfigMap:
		out.(*corev1.ConfigMap).Data = w.Data
	case *corev1.Secret:
		out.(*corev1.Secret).Data = w.Data
	default:
		panic(fmt.Sprintf("ensure does not manage a %T", want))
	}
	out.SetLabels(labels.Merge(out.GetLabels(), want.GetLabels()))
	out.SetAnnotations(labels.Merge(out.GetAnnotations(), want.GetAnnotations()))
	out.SetOwnerReferences(withOwners(out.GetOwnerReferences(), want.GetOwnerReferences()))
	return out
}

// withOwners is have with each of want's owner references in place of the
// one with its UID, or of another controller reference when it is one (an
// object has at most one), or added; in have's order, so that an object
// already as wanted is unchanged.
func withOwners(have, want []metav1.OwnerReference) []metav1.OwnerReference {
	if len(want) == 0 {
		return have
	}
	out := slices.Clone(have)
	for _, w := range want {
		otherController := func(ref metav1.OwnerReference) bool { return ptr.Deref(ref.Controller, false) && ref.UID != w.UID }
		i := slices.IndexFunc(out, func(ref metav1.OwnerReference) bool { return ref.UID == w.UID })
		if i < 0 && ptr.Deref(w.Controller, false) {
			i = slices.IndexFunc(out, otherController)
		}
		if i < 0 {
			out = append(out, w)
			continue
		}
		out[i] = w
		if ptr.Deref(w.Controller, false) {
			out = slices.DeleteFunc(out, otherController)
		}
	}
	return out
}
