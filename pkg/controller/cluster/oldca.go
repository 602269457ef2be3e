package cluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/auditwebhook"
	"github.com/carousel-dev/carousel/pkg/controller/workerrollout"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
	"github.com/carousel-dev/carousel/pkg/oldca"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// AuditWebhook is where managed API servers send their audit events: the
// manager's webhook server, as the managed API servers reach it.
type AuditWebhook struct {
	// URL is the receiver's base URL (…/audit); a Cluster's kubeconfig
	// points at URL/<namespace>/<name>.
	URL string
	// CABundle returns the PEM bundle the managed API servers verify the
	// receiver's serving certificate with.
	CABundle func() ([]byte, error)
}

// DefaultOldCAUsageWindow is how recent a client certificate's use must be
// for the old-CA usage gate to count it.
const DefaultOldCAUsageWindow = time.Hour

// nodeRecheck is how often a Prepared Cluster's Nodes are read again while
// none of them holds the gate, or only Nodes that a person changes (see
// oldca.Dependent.ByHand): carousel.dev/operation=reconcile reads them at
// once.
const nodeRecheck = time.Minute

// keptNodesLimit is how long the gate keeps what a Cluster's Nodes last
// decided while they cannot be read; from then on it says they cannot be
// read (oldca.Facts.NodesUnreadable), which holds it: a Node that came back
// meanwhile on an old-CA certificate is not seen.
const keptNodesLimit = 5 * nodeRecheck

// auditWebhookBundleRetry is how soon a pass that could not read the audit
// webhook's CA bundle looks again, while it has been unreadable for less
// than four times that; longer, a quarter of that time (rotation.PollDelay).
const auditWebhookBundleRetry = time.Minute

// auditBundleRun keys, in Reconciler.auditBundleUnreadable, since when the
// audit webhook's CA bundle, which every Cluster shares, has been unreadable.
var auditBundleRun = types.NamespacedName{Name: "audit-webhook-ca-bundle"}

// auditWebhookUser names the token's user in the audit kubeconfig.
const auditWebhookUser = "kube-apiserver-audit"

// auditWebhookPhase keeps the Cluster's audit-webhook Secret: the kubeconfig
// its API server's audit webhook backend reads, with a bearer token made
// once and kept.
func (r *Reconciler) auditWebhookPhase(ctx context.Context, s *scope) error {
	if r.AuditWebhook == nil {
		return nil
	}
	c := s.cluster
	name := credentials.AuditWebhookSecretName(c.Name)
	token := []byte(nil)
	if existing := s.objs.secrets[name]; existing != nil {
		token = existing.Data[auditwebhook.DataKeyToken]
	}
	if len(token) == 0 {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return err
		}
		token = []byte(base64.RawURLEncoding.EncodeToString(raw))
	}
	caBundle, err := r.AuditWebhook.CABundle()
	if err == nil && len(caBundle) == 0 {
		err = errors.New("it is empty")
	}
	if err != nil {
		// Not this Cluster's fault, nor a reason to hold its credentials:
		// the mounted bundle may not be there yet (the kubelet fills a
		// volume of a Secret created since within a minute or so), and
		// nothing else brings the Cluster back when it is.
		// A bundle that stays away (a mount misconfigured) has every
		// Cluster looked at again later and later, up to an hour apart.
		now := r.Clock.Now()
		retry := rotation.PollDelay(r.auditBundleUnreadable.start(auditBundleRun, now), now, auditWebhookBundleRetry, time.Hour)
		log.FromContext(ctx).Info("not writing the audit-webhook Secret: the webhook's CA bundle cannot be read; looking again later", "error", err.Error(), "after", retry)
		s.wakeAt(now.Add(retry))
		return nil
	}
	r.auditBundleUnreadable.forget(auditBundleRun)
	server := strings.TrimSuffix(r.AuditWebhook.URL, "/") + "/" + c.Namespace + "/" + c.Name
	kubeconfig, err := credentials.TokenKubeconfig("carousel", server, caBundle, string(token), auditWebhookUser)
	if err != nil {
		return err
	}
	return r.writeSecret(ctx, c, s.objs, desiredSecret{name: name, labels: map[string]string{v1alpha1.LabelCluster: c.Name},
		data: map[string][]byte{auditwebhook.DataKeyToken: token, v1alpha1.DataKeyKubeconfig: kubeconfig}})
}

// oldCAUsagePhase decides, while the rotation is Prepared, who still depends
// on the old CAs (package oldca), and records it in the rotation status;
// in every other phase it removes the record.
func (r *Reconciler) oldCAUsagePhase(ctx context.Context, s *scope) error {
	c := s.cluster
	rot := c.CARotation()
	if rot == nil || s.decision == nil {
		return nil
	}
	if rot.Phase != v1alpha1.RotationPrepared || rot.LastInitiationTime == nil || rot.LastInitiationFinishedTime == nil {
		r.unreadNodes.forget(client.ObjectKeyFromObject(c)) // the next Prepared counts its failed reads anew
		if rot.OldCAUsage != nil {
			rot = rot.DeepCopy()
			rot.OldCAUsage = nil
			setCARotation(c, rot)
		}
		return nil
	}
	now := r.Clock.Now()
	window := r.OldCAUsageWindow
	if window == 0 {
		window = DefaultOldCAUsageWindow
	}
	facts := oldca.Facts{
		Started: rot.LastInitiationTime.Time,
		// The window reaches back by the oldca.Settling the record may trail a client in use.
		WindowStart:     now.Add(-window - oldca.Settling),
		Prepared:        rot.LastInitiationFinishedTime.Time,
		NewClientIssuer: hex.EncodeToString(s.cas[v1alpha1.CARoleClient].Current.Cert.SubjectKeyId),
		OldClientIssuer: previousIssuer(s.cas[v1alpha1.CARoleClient]),
		Certificates:    s.certs.clients,
		Now:             now,
		CollectingUntil: rot.LastInitiationFinishedTime.Add(oldca.Settling),
	}
	readsNodes := c.Spec.ControlPlane.Endpoint != "" && r.ManagedNodes != nil
	var unreadSince time.Time // since when the Nodes' reads have failed; zero while they work
	basis := nodesNotRead     // what the verdict's Node part rests on
	if s.endpointRemoved {
		// The Nodes cannot be read, and not having read them says nothing
		// about them: a Node named before must not drop off the verdict.
		facts.NodesUnreadable = true
	} else if readsNodes {
		key := client.ObjectKeyFromObject(c)
		nodes, leases, err := r.ManagedNodes(ctx, c)
		if err == nil {
			r.unreadNodes.forget(key)
		} else {
			log.FromContext(ctx).V(1).Info("reading the managed cluster's Nodes for the old-CA usage gate", "error", err.Error())
			r.OfflineNodes.Forget(key) // its API server may be away: the nodes behind count from anew
			unreadSince = r.unreadNodes.start(key, now)
		}
		switch {
		case err == nil:
			basis = nodesRead
			offline := func(name string, behind bool) bool { return r.OfflineNodes.Confirmed(key, name, behind, now) }
			facts.Nodes = nodeFacts(c, nodes, leases, noderenewal.Digest(s.trust[v1alpha1.CARoleCluster]), offline, rot.LastInitiationTime.Time, now)
		case rot.OldCAUsage != nil && now.Sub(unreadSince) < keptNodesLimit:
			// A passing failure does not change what the Nodes last said.
			facts.KeptNodes = keptNodes(rot.OldCAUsage)
			basis = r.verdicts.keptNodes(c)
		default:
			facts.NodesUnreadable = true
		}
	}
	usageRecord := credentials.CertificateUsageConfigMapName(c.Name)
	cm, err := r.record(ctx, s, usageRecord)
	if err != nil {
		return err
	}
	facts.UsageLost = trackRecord(c, usageRecord, cm)
	if cm != nil {
		usage, err := oldca.Parse(cm.Data[oldca.DataKey])
		if err != nil {
			// An empty record, which the gate takes for a silent audit
			// webhook; the receiver starts it over with its next batch.
			log.FromContext(ctx).Info("the client-certificate usage record does not parse", "error", err.Error())
			usage = &oldca.Usage{}
		}
		facts.Usage = usage
	}
	if facts.Kubeconfigs, facts.KubeconfigsUnreadable, facts.KubeconfigsLost, err = r.issuedKubeconfigs(ctx, s); err != nil {
		return err
	}
	if oldca.UnreportedNodes(facts.Nodes) || facts.Usage != nil {
		// Up to 768 KiB, read only when something is judged by it.
		if facts.KubeletCertificates, facts.KubeletCertificatesUnreadable, facts.KubeletCertificatesLost, err = r.kubeletCertificates(ctx, c); err != nil {
			return err
		}
	}
	deps := oldca.Dependents(facts)
	status := usageStatus(deps, facts.Usage != nil)
	if rot = c.CARotation(); !equality.Semantic.DeepEqual(status, rot.OldCAUsage) { // trackRecord may have changed it
		rot = rot.DeepCopy()
		rot.OldCAUsage = status
		setCARotation(c, rot)
	}
	r.verdicts.record(c, basis)
	if readsNodes {
		// Nodes report through annotations, which raise no event here:
		// look again soon while they hold the gate, or the verdict waits for
		// them to be read, else once a minute; backing off while their reads
		// keep failing.
		next := now.Add(nodeRecheck)
		if basis == nodesUnknown || slices.ContainsFunc(deps, func(d oldca.Dependent) bool {
			return d.Kind == v1alpha1.OldCADependentNode && !d.ByHand || d.Name == "nodes"
		}) {
			next = now.Add(r.pollDelay(unreadSince))
		}
		s.wakeAt(next)
	}
	if facts.Usage != nil {
		// When the collecting ends, and when the record falls silent.
		if now.Before(facts.CollectingUntil) {
			s.wakeAt(facts.CollectingUntil)
		}
		if silent := facts.Usage.Newest(now).Add(oldca.Silence); silent.After(now) {
			s.wakeAt(silent)
		}
	}
	// A user counts until its last use leaves the window, a kubeconfig
	// until it expires: look again then.
	for _, d := range deps {
		if !d.LastSeen.IsZero() {
			s.wakeAt(d.LastSeen.Add(window + oldca.Settling))
		}
		if !d.Expires.IsZero() {
			s.wakeAt(d.Expires)
		}
	}
	return nil
}

// issuedKubeconfigs is the record of the kubeconfigs kubectl carousel
// issued for the Cluster; nil when there is none. unreadable: it does not
// parse; lost: it is not the record the rotation judges by (trackRecord).
func (r *Reconciler) issuedKubeconfigs(ctx context.Context, s *scope) (record *oldca.Kubeconfigs, unreadable, lost bool, err error) {
	name := credentials.IssuedKubeconfigsConfigMapName(s.cluster.Name)
	cm, err := r.record(ctx, s, name)
	if err != nil {
		return nil, false, false, err
	}
	record, unreadable = parseRecord(ctx, cm, func(cm *corev1.ConfigMap) (*oldca.Kubeconfigs, error) {
		return oldca.ParseKubeconfigs(cm.Data[oldca.KubeconfigsDataKey])
	})
	return record, unreadable, trackRecord(s.cluster, name, cm), nil
}

// record is the ConfigMap of one of the Cluster's records that the cache
// lists, read from the API server: the cache holds a record's metadata only
// (cacheConfigMap). The read is of a version no older than the cache's,
// which the API server serves from its watch cache. nil when there is none.
// A record the rotation judges by (recordUIDs) is read by name when the cache
// does not list it: it may have lost its label, which would hide what it
// holds from the gate.
func (r *Reconciler) record(ctx context.Context, s *scope, name string) (*corev1.ConfigMap, error) {
	key := client.ObjectKey{Namespace: s.cluster.Namespace, Name: name}
	cached := s.objs.configMaps[name]
	switch rot := s.cluster.CARotation(); {
	case cached != nil:
		return r.readRecord(ctx, key, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: cached.ResourceVersion}})
	case rot != nil && *recordUIDs(rot, s.cluster.Name)[name] != "":
		return r.readRecord(ctx, key)
	}
	return nil, nil
}

// recordUIDs are the fields of rot that keep the UIDs of the Cluster's
// records of package oldca (credentials.IsRecord), by the record's name.
func recordUIDs(rot *v1alpha1.CARotation, cluster string) map[string]*types.UID {
	return map[string]*types.UID{
		credentials.CertificateUsageConfigMapName(cluster):    &rot.UsageRecordUID,
		credentials.IssuedKubeconfigsConfigMapName(cluster):   &rot.KubeconfigRecordUID,
		credentials.KubeletCertificatesConfigMapName(cluster): &rot.KubeletRecordUID,
	}
}

// recordRecordUIDs keeps in rot, a rotation starting, the UIDs of the
// Cluster's records of package oldca, read from the API server, not the
// cache, which may not show a record created just before (by the first
// audit batch, say): the gate would then miss that record's deletion.
func (r *Reconciler) recordRecordUIDs(ctx context.Context, c *v1alpha1.Cluster, rot *v1alpha1.CARotation) error {
	for name, uid := range recordUIDs(rot, c.Name) {
		there, err := r.recordUIDThere(ctx, c.Namespace, name)
		if err != nil {
			return err
		}
		*uid = there
	}
	return nil
}

// recordUIDThere is the UID of the record name as the API server holds it;
// empty when there is none.
func (r *Reconciler) recordUIDThere(ctx context.Context, namespace, name string) (types.UID, error) {
	record, err := r.readMetadata(ctx, configMapKind, client.ObjectKey{Namespace: namespace, Name: name})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading the record %s: %w", name, err)
	}
	return record.UID, nil
}

// trackRecord says whether the record name, found as cm (nil when there is
// none), is lost to the rotation: the rotation judges by a record of that
// name (its UID kept since the start, or since first seen) that is gone or
// is not cm. What the gate, and an abort, read in a lost record's place
// misses what the lost one held: entries from before the rotation, or from
// before the record was started over. A record first seen while the
// rotation runs, up to Prepared or in Aborting, becomes the one it judges by.
func trackRecord(c *v1alpha1.Cluster, name string, cm *corev1.ConfigMap) (lost bool) {
	rot := c.CARotation()
	if rot == nil {
		return false
	}
	switch kept := *recordUIDs(rot, c.Name)[name]; {
	case kept != "":
		return cm == nil || cm.UID != kept
	case cm != nil && tracksRecords(rot.Phase):
		rot = rot.DeepCopy()
		*recordUIDs(rot, c.Name)[name] = cm.UID
		setCARotation(c, rot)
	}
	return false
}

// tracksRecords says whether a rotation in phase keeps the UID of a record
// first seen (trackRecord).
func tracksRecords(phase v1alpha1.CARotationPhase) bool {
	switch phase {
	case v1alpha1.RotationPreparing, v1alpha1.RotationPreparingWithoutWorkersRollout, v1alpha1.RotationWaitingForWorkersRollout,
		v1alpha1.RotationPrepared, v1alpha1.RotationAborting:
		return true
	}
	return false
}

// recordsPhase keeps, while the rotation runs, the UID of a record the
// cache lists first seen (trackRecord), as the API server holds it: the
// cache may still show one deleted since. The kubelet certificate record,
// which the cache does not list, is kept where the gate reads it.
func (r *Reconciler) recordsPhase(ctx context.Context, s *scope) error {
	c := s.cluster
	rot := c.CARotation()
	if rot == nil || !tracksRecords(rot.Phase) {
		return nil
	}
	for _, name := range []string{credentials.CertificateUsageConfigMapName(c.Name), credentials.IssuedKubeconfigsConfigMapName(c.Name)} {
		if s.objs.configMaps[name] == nil || *recordUIDs(c.CARotation(), c.Name)[name] != "" {
			continue
		}
		switch uid, err := r.recordUIDThere(ctx, c.Namespace, name); {
		case err != nil:
			return err
		case uid != "":
			trackRecord(c, name, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}})
		}
	}
	return nil
}

// kubeletCertificates is the Cluster's record of signed kubelet
// certificates, which the cache does not list (see kubeletcsr.Recorder), read
// from the API server; nil when there is none. unreadable and lost as
// issuedKubeconfigs'. The rotation keeps it as the one it judges by when it
// took none before (trackRecord): one created after the start, and lost
// before this read, is not noticed.
func (r *Reconciler) kubeletCertificates(ctx context.Context, c *v1alpha1.Cluster) (record *oldca.KubeletCertificates, unreadable, lost bool, err error) {
	name := credentials.KubeletCertificatesConfigMapName(c.Name)
	cm, err := r.readRecord(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name})
	if err != nil {
		return nil, false, false, err
	}
	record, unreadable = parseRecord(ctx, cm, func(cm *corev1.ConfigMap) (*oldca.KubeletCertificates, error) {
		return oldca.ReadKubeletCertificates(cm.Data, cm.BinaryData)
	})
	return record, unreadable, trackRecord(c, name, cm), nil
}

// readRecord reads the ConfigMap of a record from the API server; nil when
// there is none.
func (r *Reconciler) readRecord(ctx context.Context, key client.ObjectKey, opts ...client.GetOption) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := r.apiReader().Get(ctx, key, cm, opts...)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the record %s: %w", key.Name, err)
	}
	return cm, nil
}

// parseRecord is the record of package oldca that read finds in cm; nil
// when cm is nil, and true when it does not parse.
func parseRecord[T any](ctx context.Context, cm *corev1.ConfigMap, read func(*corev1.ConfigMap) (*T, error)) (*T, bool) {
	if cm == nil {
		return nil, false
	}
	record, err := read(cm)
	if err != nil {
		log.FromContext(ctx).Info("a record of the old-CA usage gate does not parse", "configMap", cm.Name, "error", err.Error())
		return nil, true
	}
	return record, false
}

// previousIssuer is the hex subject key identifier of cas' previous CA;
// empty when there is none.
func previousIssuer(cas *credentials.CAs) string {
	if cas.Previous == nil {
		return ""
	}
	return hex.EncodeToString(cas.Previous.Cert.SubjectKeyId)
}

// kubeconfigHolders are, in Aborting once the client CAs are swapped back
// and until the new one is deleted, the users holding kubeconfigs from the
// new client CA only (oldca.Kubeconfigs.Stranded), for whom the abort
// keeps it, and why they cannot be told (the record lost or unreadable),
// which holds it too; s wakes when the first of them expires.
func (r *Reconciler) kubeconfigHolders(ctx context.Context, s *scope) (users, unknown []string, err error) {
	clientCAs := s.cas[v1alpha1.CARoleClient]
	if s.cluster.CARotationPhase() != v1alpha1.RotationAborting || clientCAs == nil || clientCAs.Previous == nil || !clientCAs.Restored() {
		return nil, nil, nil
	}
	issued, unreadable, lost, err := r.issuedKubeconfigs(ctx, s)
	if err != nil {
		return nil, nil, err
	}
	if lost {
		return nil, []string{"(ConfigMap " + credentials.IssuedKubeconfigsConfigMapName(s.cluster.Name) +
			", the record this rotation judges by, was deleted since, and the kubeconfigs from the new client CA it recorded with it: only a forced abort goes on, once every user has taken a new kubeconfig)"}, nil
	}
	if unreadable {
		return nil, []string{"(ConfigMap " + credentials.IssuedKubeconfigsConfigMapName(s.cluster.Name) +
			" does not parse: repair it, or force the abort once every user has taken a new kubeconfig; do not delete it, which loses the kubeconfigs from the new client CA it recorded)"}, nil
	}
	for _, d := range issued.Stranded(previousIssuer(clientCAs), hex.EncodeToString(clientCAs.Current.Cert.SubjectKeyId), r.Clock.Now()) {
		users = append(users, d.Name)
		s.wakeAt(d.Expires)
	}
	return users, nil, nil
}

// kubeletHolders are, in Aborting once the client CAs are swapped back and
// until the status records everything back on the old CAs, the Nodes of the
// managed cluster whose kubelet's last client certificate Carousel signed
// (the kubelet record, oldca.KubeletCertificates.Holding) is from the new
// client CA and unexpired, or whose last serving certificate is from the new
// kubelet CA, for whom the abort keeps those CAs: a kubelet outside the
// worker pools the abort rolls (or one that renewed meanwhile) renews by
// itself only late in its certificate's life, and deleting the client CA
// would lock it out, the kubelet CA leave the API server unable to verify it
// (logs, exec, port-forward). What cannot be told (the record lost, unreadable or
// with certificates it had no room for, the Nodes unreadable) is returned
// as unknown, and holds the abort too. s wakes when the first certificate
// expires.
func (r *Reconciler) kubeletHolders(ctx context.Context, s *scope) (holders, unknown []string, err error) {
	c := s.cluster
	clientCAs := s.cas[v1alpha1.CARoleClient]
	rot := c.CARotation()
	switch {
	case c.CARotationPhase() != v1alpha1.RotationAborting || rot.AbortRolledBackTime != nil || clientCAs == nil || clientCAs.Previous == nil ||
		!clientCAs.Restored():
		return nil, nil, nil
	case s.endpointRemoved:
		// The Nodes of the managed cluster the rotation ran on cannot be
		// read: it holds, as the gate does.
		return nil, []string{"(the rotation's endpoint was removed from the spec, so Carousel cannot read the managed cluster's Nodes: " +
			"set it again, or force the abort once every kubelet runs on certificates from the old CAs)"}, nil
	case c.Spec.ControlPlane.Endpoint == "" || r.ManagedNodes == nil:
		return nil, nil, nil
	}
	name := credentials.KubeletCertificatesConfigMapName(c.Name)
	record, unreadable, lost, err := r.kubeletCertificates(ctx, c)
	switch {
	case err != nil:
		return nil, nil, err
	case lost:
		return nil, []string{"(ConfigMap " + name + ", the record of the kubelet certificates Carousel signed that this rotation judges by, " +
			"was deleted since, and what it held with it: only a forced abort goes on, once every kubelet runs on certificates from the old CAs)"}, nil
	case unreadable:
		return nil, []string{"(ConfigMap " + name + " does not parse: repair it, or force the abort once every kubelet runs on certificates from the old CAs)"}, nil
	case record == nil:
		return nil, nil, nil
	}
	now := r.Clock.Now()
	// What the record forgot holds the abort; the holders it names are
	// named, and asked, all the same.
	unrecorded := func(until *time.Time, what string) {
		if until != nil && now.Before(*until) {
			s.wakeAt(*until)
			unknown = append(unknown, fmt.Sprintf("(ConfigMap %s had no room for some kubelet %s certificates, valid until %s: "+
				"force the abort once every kubelet runs on certificates from the old CAs)", name, what, until.UTC().Format(time.RFC3339)))
		}
	}
	unrecorded(record.UnrecordedUntil, "client")
	newKubeletIssuer := ""
	if kubeletCAs := s.cas[v1alpha1.CARoleKubelet]; kubeletCAs != nil && kubeletCAs.Previous != nil && kubeletCAs.Restored() {
		newKubeletIssuer = hex.EncodeToString(kubeletCAs.Previous.Cert.SubjectKeyId)
		unrecorded(record.UnrecordedServingUntil, "serving")
	}
	nodes, _, err := r.ManagedNodes(ctx, c)
	if err != nil {
		log.FromContext(ctx).Info("reading the managed cluster's Nodes for the abort", "error", err.Error())
		return nil, append(unknown, "(the managed cluster's Nodes could not be read, so Carousel cannot tell whose kubelet holds a certificate from a new CA)"), nil
	}
	newIssuer := hex.EncodeToString(clientCAs.Previous.Cert.SubjectKeyId)
	for _, n := range nodes {
		client, holdsClient := record.Holding(n.Name, newIssuer, now)
		serving, holdsServing := record.HoldingServing(n.Name, newKubeletIssuer, now)
		if holdsClient || holdsServing {
			holders = append(holders, n.Name)
			if holdsClient {
				s.wakeAt(client.NotAfter)
			}
			if holdsServing {
				s.wakeAt(serving.NotAfter)
			}
			if pool := c.Spec.WorkerPool(n.Labels[v1alpha1.LabelPool]); pool != nil {
				if _, ok := r.WorkerRollouts[pool.RolloutStrategy].(NodeAsker); ok {
					if s.askableHolders == nil {
						s.askableHolders = map[v1alpha1.WorkerRolloutStrategy][]corev1.Node{}
					}
					s.askableHolders[pool.RolloutStrategy] = append(s.askableHolders[pool.RolloutStrategy], n)
				}
			}
		}
	}
	slices.Sort(holders) // the status names them: the same order each pass
	return holders, unknown, nil
}

// askKubeletHolders has the rollouts that can ask their nodes to renew once
// more ask the kubelet holders of their pools: a node offline while the abort
// rolled its pool is not asked when it comes back, and the abort keeps the
// new CAs until its kubelet renews. Asked, it renews from the old CAs once
// its node agent is back; one asked already is left alone. A node that
// cannot be asked is logged and asked again next pass: the abort's status
// still says what it waits for, which the pass would not write if it failed.
func (r *Reconciler) askKubeletHolders(ctx context.Context, s *scope) {
	for _, strategy := range slices.Sorted(maps.Keys(s.askableHolders)) {
		asked, err := r.WorkerRollouts[strategy].(NodeAsker).AskNodes(ctx, s.cluster, s.askableHolders[strategy])
		if len(asked) > 0 {
			log.FromContext(ctx).Info("asked Nodes whose kubelet holds a certificate from a new CA the abort deletes to renew", "nodes", asked)
		}
		if err != nil {
			log.FromContext(ctx).Info("asking Nodes whose kubelet holds a certificate from a new CA the abort deletes to renew", "error", err.Error())
		}
	}
}

// keptNodes are the dependents of u that the managed cluster's Nodes decide:
// the Nodes, "Cluster nodes", and "Cluster kubelet-certificates" (the
// kubelet record is read only when Nodes without a node agent are judged by
// it, so a failed read of the Nodes does not look at it).
func keptNodes(u *v1alpha1.OldCAUsage) []oldca.Dependent {
	var kept []oldca.Dependent
	for _, d := range u.Dependents {
		if d.Kind == v1alpha1.OldCADependentNode || d.Kind == v1alpha1.OldCADependentCluster && (d.Name == "nodes" || d.Name == "kubelet-certificates") {
			kept = append(kept, oldca.Dependent{Kind: d.Kind, Name: d.Name, Message: d.Message})
		}
	}
	return kept
}

// usageStatus is the status record of deps: the first
// v1alpha1.MaxOldCADependents, and how many there are.
func usageStatus(deps []oldca.Dependent, auditReceived bool) *v1alpha1.OldCAUsage {
	u := &v1alpha1.OldCAUsage{Total: int32(len(deps)), AuditEventsReceived: auditReceived} //nolint:gosec // bounded by the objects of one Cluster
	for _, d := range deps[:min(len(deps), v1alpha1.MaxOldCADependents)] {
		dep := v1alpha1.OldCADependent{Kind: d.Kind, Name: d.Name, Message: d.Message}
		if !d.LastSeen.IsZero() {
			dep.LastSeen = &metav1.Time{Time: d.LastSeen.UTC().Truncate(time.Second)}
		}
		u.Dependents = append(u.Dependents, dep)
	}
	return u
}

// setOldCAsUnusedCondition says, while the rotation is Prepared, whether
// anything still depends on the old CAs; the condition is absent otherwise.
func (r *Reconciler) setOldCAsUnusedCondition(c *v1alpha1.Cluster) {
	rot := c.CARotation()
	if rot == nil || rot.Phase != v1alpha1.RotationPrepared || rot.OldCAUsage == nil {
		meta.RemoveStatusCondition(&c.Status.Conditions, v1alpha1.ConditionOldCAsUnused)
		return
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionOldCAsUnused, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonNoOldCADependents,
		Message: "nothing Carousel knows of depends on the old CAs any more: completing the rotation locks none of them out"}
	switch {
	case c.Spec.ControlPlane.Endpoint == "":
		cond.Message += " (the Cluster has no endpoint: only Carousel's certificates and records were checked)"
	case !rot.OldCAUsage.AuditEventsReceived:
		cond.Message += " (no audit events were received from the managed API server: only Nodes and Carousel's certificates were checked)"
	}
	if rot.OldCAUsage.Total > 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonOldCADependents
		cond.Message = fmt.Sprintf("%s; complete-ca-rotation is refused until they move to the new CAs, unless forced with %s=%s%s",
			rotation.DescribeOldCAUsage(rot.OldCAUsage), v1alpha1.OperationAnnotation, v1alpha1.OperationCompleteCARotation, v1alpha1.OperationForceSuffix)
	}
	r.setCondition(c, cond)
}

// verdicts remembers, per Cluster, the old-CA usage gate's last verdict this
// process reached, for the rotation it judged.
type verdicts struct {
	mu sync.Mutex
	of map[types.NamespacedName]verdict
}

type verdict struct {
	rotationStarted time.Time
	// endpoint is the managed cluster's the verdict judged the Nodes of.
	endpoint string
	usage    *v1alpha1.OldCAUsage
	nodes    nodesPart
}

// nodesPart is what a verdict's Node part rests on, for its endpoint.
type nodesPart int

const (
	// nodesNotRead: the gate reads no Nodes (no endpoint), or says they
	// cannot be read.
	nodesNotRead nodesPart = iota
	// nodesRead: this process read them, in the pass or in the one whose
	// Node part a pass that failed to read them kept.
	nodesRead
	// nodesUnknown: kept from a verdict no read of this process backs, one
	// of another process (before a restart, another replica) or of another
	// endpoint (none, before one was set): a completion waits for the Nodes
	// to be read, until the gate says they cannot be (keptNodesLimit).
	nodesUnknown
)

func (v *verdicts) record(c *v1alpha1.Cluster, nodes nodesPart) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.of == nil {
		v.of = map[types.NamespacedName]verdict{}
	}
	rot := c.CARotation()
	v.of[client.ObjectKeyFromObject(c)] = verdict{rotationStarted: rot.LastInitiationTime.Time, endpoint: c.Spec.ControlPlane.Endpoint,
		usage: rot.OldCAUsage.DeepCopy(), nodes: nodes}
}

func (v *verdicts) forget(key types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.of, key)
}

// ofCluster is the verdict in c's status when this process reached it, for c's
// rotation and endpoint.
func (v *verdicts) ofCluster(c *v1alpha1.Cluster) (verdict, bool) {
	v.mu.Lock()
	got, ok := v.of[client.ObjectKeyFromObject(c)]
	v.mu.Unlock()
	rot := c.CARotation()
	return got, ok && rot != nil && rot.LastInitiationTime != nil && got.rotationStarted.Equal(rot.LastInitiationTime.Time) &&
		got.endpoint == c.Spec.ControlPlane.Endpoint && equality.Semantic.DeepEqual(got.usage, rot.OldCAUsage)
}

// keptNodes is what a verdict that keeps the Node part of the one in c's
// status rests on: a read of this process, when that verdict is its own
// and read them, or nothing it knows of.
func (v *verdicts) keptNodes(c *v1alpha1.Cluster) nodesPart {
	if got, ok := v.ofCluster(c); ok && got.nodes == nodesRead {
		return nodesRead
	}
	return nodesUnknown
}

// reachedHere says whether the verdict in c's status is one this process
// reached, on Nodes it read if it judged any.
func (v *verdicts) reachedHere(c *v1alpha1.Cluster) bool {
	got, ok := v.ofCluster(c)
	return ok && got.nodes != nodesUnknown
}

// awaitingNodes says why a completion waits while completionAwaitsNodes.
const awaitingNodes = "it has not read the managed cluster's Nodes since the manager started (or the endpoint was set), " +
	"and the last verdict on them, which names no one, may be out of date; it reads them again until they can be read, " +
	"or, after 5 minutes, names them unreadable"

// completionAwaitsNodes says whether op, on c, is a completion that waits
// for the old-CA usage gate to read the Nodes (nodesUnknown): its passes
// look again as the gate's reads of them do, not at once.
func (r *Reconciler) completionAwaitsNodes(op v1alpha1.Operation, c *v1alpha1.Cluster) bool {
	got, ok := r.verdicts.ofCluster(c)
	return ok && got.nodes == nodesUnknown && gatedCompletion(op, c)
}

// completionWaitsForGate says whether op, on c, is a completion the old-CA
// usage gate must judge first in this process: a verdict in the status that
// names no one, reached by another replica or by this one before a restart,
// may be out of date (audit events the manager did not receive while it was
// down, a Node back on an old-CA certificate meanwhile), and completing on it
// could lock out a client the gate would name. Such a completion waits for a
// pass to judge, one that read the Nodes or kept what this process's last
// verdict said of them; a forced one does not wait, and one the verdict holds
// is refused.
func (r *Reconciler) completionWaitsForGate(op v1alpha1.Operation, c *v1alpha1.Cluster) bool {
	return gatedCompletion(op, c) && !r.verdicts.reachedHere(c)
}

// gatedCompletion says whether op, on c, is a completion that goes ahead
// only on a verdict of this process: one not forced, of a Prepared rotation
// whose verdict in the status names no one.
func gatedCompletion(op v1alpha1.Operation, c *v1alpha1.Cluster) bool {
	rot := c.CARotation()
	return op.Verb.CAVerb() == v1alpha1.VerbCompleteCARotation && !op.Force && rot != nil && rot.Phase == v1alpha1.RotationPrepared &&
		rot.OldCAUsage != nil && rot.OldCAUsage.Total == 0
}

// forgetOldCAUsage drops the old-CA usage gate's verdict from the status
// when a pass failed for more than a conflict (the gate's phase, the last,
// judges only in a pass that gets that far): who depends on the old CAs may
// have changed since the pass that judged, for example a client the audit
// events show since, and a completion must not be let through on that
// verdict. A completion is refused until a pass judges again.
func forgetOldCAUsage(c *v1alpha1.Cluster) {
	if rot := c.CARotation(); rot != nil && rot.OldCAUsage != nil {
		rot = rot.DeepCopy()
		rot.OldCAUsage = nil
		setCARotation(c, rot)
	}
}

// nodeFacts are the Nodes as the gate judges them: the issuer their node
// agent reports, whether a node agent marked them, whether the worker
// rollout takes them for offline (see workerrollout.PlanRollout), with
// their pool's offlineNodeTimeout, once offline confirms it
// (workerrollout.OfflineNodes.Confirmed, given whether it is behind), whether
// their pool rolls in place, and whether no worker rollout moved them
// (unrolled).
func nodeFacts(c *v1alpha1.Cluster, nodes []corev1.Node, leases []coordinationv1.Lease, clusterBundle string, offline func(name string, behind bool) bool,
	started, now time.Time) []oldca.Node {
	seen, newest := workerrollout.Heartbeats(nodes, leases, now)
	var byHand []string
	if rot := c.CARotation(); rot != nil {
		byHand = rot.PoolsRolledByHand
	}
	out := make([]oldca.Node, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		pool := c.Spec.WorkerPool(n.Labels[v1alpha1.LabelPool])
		notMoved := unrolled(n, pool, pool != nil && slices.Contains(byHand, pool.Name), clusterBundle, started)
		inPlace := pool != nil && pool.RollsInPlace()
		if pool == nil {
			pool = &v1alpha1.WorkerPool{}
		}
		_, agent := n.Annotations[v1alpha1.AnnotationNodeAgent]
		out = append(out, oldca.Node{Name: n.Name, ClientIssuer: n.Annotations[v1alpha1.AnnotationClientCertificateIssuer],
			Offline: offline(n.Name, newest.Sub(seen[n.Name]) > pool.OfflineNodeTimeoutOrDefault()), Agent: agent, InPlace: inPlace, Unrolled: notMoved})
	}
	return out
}

// unrolled says why no worker rollout of the rotation that started at
// started moved n to the published cluster bundle, whose digest is
// clusterBundle, or "" when one did, or may have. That is a Node registered
// before the start (one registered since bootstrapped with the bundles
// published then, cluster-info, as a Replace pool's new Machines do, whose
// Nodes need not carry the label), whose node agent, if any, does not report
// the published bundle, and whose carousel.dev/pool label names no pool of
// the Cluster (pool is nil) or a pool that Carousel's own rollout finished
// without it: an InPlace rollout asked every online node of the pool, a
// Replace rollout replaced them, and a Manual pool is reported by the user,
// so a Node there that does not report the bundle was offline when the pool
// rolled, or was labelled into the pool, or the pool added, since. A pool
// the user reported rolled with rollout-workers (rolledByHand) is taken as
// the user reported it.
func unrolled(n *corev1.Node, pool *v1alpha1.WorkerPool, rolledByHand bool, clusterBundle string, started time.Time) string {
	label := n.Labels[v1alpha1.LabelPool]
	switch {
	case rolledByHand || !n.CreationTimestamp.Time.Before(started) || n.Annotations[v1alpha1.AnnotationTrustBundle] == clusterBundle:
		return ""
	case pool != nil:
		return fmt.Sprintf("its worker pool %s rolled without it (it was offline then, or labelled into the pool, or the pool added, since)", pool.Name)
	case label == "":
		return "it has no " + v1alpha1.LabelPool + " label"
	}
	return fmt.Sprintf("its %s label, %q, names no worker pool of the Cluster", v1alpha1.LabelPool, label)
}

// ManagedNodes lists a managed cluster's Nodes and node Leases through its
// connection.
func ManagedNodes(clients interface {
	Client(*v1alpha1.Cluster) (client.Client, bool)
}) func(context.Context, *v1alpha1.Cluster) ([]corev1.Node, []coordinationv1.Lease, error) {
	return func(ctx context.Context, c *v1alpha1.Cluster) ([]corev1.Node, []coordinationv1.Lease, error) {
		remote, ok := clients.Client(c)
		if !ok {
			return nil, nil, fmt.Errorf("not connected to the managed cluster of %s at %s", client.ObjectKeyFromObject(c), c.Spec.ControlPlane.Endpoint)
		}
		var nodes corev1.NodeList
		if err := remote.List(ctx, &nodes); err != nil {
			return nil, nil, err
		}
		var leases coordinationv1.LeaseList
		if err := remote.List(ctx, &leases, client.InNamespace(corev1.NamespaceNodeLease)); err != nil {
			return nil, nil, err
		}
		return nodes.Items, leases.Items, nil
	}
}
