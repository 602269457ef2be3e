package cluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/auditwebhook"
	"github.com/carousel-dev/carousel/pkg/credentials"
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
	if err != nil {
		return fmt.Errorf("reading the audit webhook's CA bundle: %w", err)
	}
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
		Started:         rot.LastInitiationTime.Time,
		// The record is up to oldca.Settling behind a client in use.
		Since:           later(rot.LastInitiationFinishedTime.Time, now.Add(-window-oldca.Settling)),
		NewClientIssuer: hex.EncodeToString(s.cas[v1alpha1.CARoleClient].Current.Cert.SubjectKeyId),
		Certificates:    s.certs.clients,
		Now:             now,
		CollectingUntil: rot.LastInitiationFinishedTime.Add(oldca.Settling),
	}
	if c.Spec.ControlPlane.Endpoint != "" && r.ManagedNodes != nil {
		nodes, err := r.ManagedNodes(ctx, client.ObjectKeyFromObject(c))
		if err != nil {
			log.FromContext(ctx).V(1).Info("reading the managed cluster's Nodes for the old-CA usage gate", "error", err.Error())
			facts.NodesUnreadable = true
		}
		for i := range nodes {
			facts.Nodes = append(facts.Nodes, oldca.Node{Name: nodes[i].Name, ClientIssuer: nodes[i].Annotations[v1alpha1.AnnotationClientCertificateIssuer]})
		}
	}
	if cm := s.objs.configMaps[credentials.CertificateUsageConfigMapName(c.Name)]; cm != nil {
		usage, err := oldca.Parse(cm.Data[oldca.DataKey])
		if err != nil {
			// The receiver starts a corrupt record over with its next batch.
			log.FromContext(ctx).Info("ignoring the client-certificate usage record", "error", err.Error())
		}
		facts.Usage = usage
	}
	deps := oldca.Dependents(facts)
	status := usageStatus(deps, facts.Usage != nil)
	if !equality.Semantic.DeepEqual(status, rot.OldCAUsage) {
		rot = rot.DeepCopy()
		rot.OldCAUsage = status
		setCARotation(c, rot)
	}
	if facts.Usage != nil && now.Before(facts.CollectingUntil) {
		s.wakeAt(facts.CollectingUntil)
	}
	// A user counts until its last use leaves the window: look again then.
	for _, d := range deps {
		if !d.LastSeen.IsZero() {
			s.wakeAt(d.LastSeen.Add(window + oldca.Settling))
		}
	}
	if facts.NodesUnreadable {
		s.wakeAt(now.Add(r.managedPollDelay(c, true)))
	}
	return nil
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
		Message: "nothing Carousel knows of depends on the old CAs: completing the rotation locks no client out"}
	if !rot.OldCAUsage.AuditEventsReceived {
		cond.Message += " (no audit events were received from the managed API server: only Nodes and Carousel's certificates were checked)"
	}
	if rot.OldCAUsage.Total > 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonOldCADependents
		cond.Message = fmt.Sprintf("%s; complete-ca-rotation is refused until they move to the new CAs, unless forced with %s=%s%s",
			rotation.DescribeOldCAUsage(rot.OldCAUsage), v1alpha1.OperationAnnotation, v1alpha1.OperationCompleteCARotation, v1alpha1.OperationForceSuffix)
	}
	r.setCondition(c, cond)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ManagedNodes lists a managed cluster's Nodes through its connection.
func ManagedNodes(clients interface {
	Client(client.ObjectKey) (client.Client, bool)
}) func(context.Context, client.ObjectKey) ([]corev1.Node, error) {
	return func(ctx context.Context, key client.ObjectKey) ([]corev1.Node, error) {
		remote, ok := clients.Client(key)
		if !ok {
			return nil, fmt.Errorf("not connected to the managed cluster %s", key)
		}
		var nodes corev1.NodeList
		if err := remote.List(ctx, &nodes); err != nil {
			return nil, err
		}
		return nodes.Items, nil
	}
}
