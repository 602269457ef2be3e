package workerrollout

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
)

// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machinedeployments,verbs=get;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=list
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get

// Cluster API's group, and the label its MachineSet controller puts on the
// Machines of a MachineDeployment.
const (
	clusterAPIGroup       = "cluster.x-k8s.io"
	labelDeploymentName   = clusterAPIGroup + "/deployment-name"
	kindMachineDeployment = "MachineDeployment"
	kindMachine           = "Machine"
	kindCluster           = "Cluster"
	// annotationPaused on a Cluster API object makes its controllers leave
	// it alone.
	annotationPaused = clusterAPIGroup + "/paused"
)

// rolloutAfterField is, per Cluster API version, where a MachineDeployment
// takes the time after which every Machine created before it is replaced.
var rolloutAfterField = map[string][]string{
	"v1beta2": {"spec", "rollout", "after"},
	"v1beta1": {"spec", "rolloutAfter"},
}

// rolloutStrategyField is, per Cluster API version, where a MachineDeployment
// names its rollout strategy (RollingUpdate or OnDelete).
var rolloutStrategyField = map[string][]string{
	"v1beta2": {"spec", "rollout", "strategy", "type"},
	"v1beta1": {"spec", "strategy", "type"},
}

// ReplaceRollout is the Replace worker rollout strategy: Carousel sets the
// rollout time of the pool's Cluster API MachineDeployment (spec.rollout.after
// in v1beta2, spec.rolloutAfter in v1beta1, whichever version the management
// cluster prefers), once per phase, and Cluster API replaces every Machine
// created before it. A Machine created since bootstrapped with the trust
// bundles Carousel publishes, and a client certificate Carousel signed from
// the current client CA; the pool is rolled once every Machine is such a
// Machine and its Node is Ready.
//
// The MachineDeployment is read and patched in the Cluster's namespace only:
// a tenant that may write the Cluster names one of its own.
type ReplaceRollout struct {
	Connections ManagedClients // reaches the managed clusters
	// Management patches the MachineDeployment and reads the Cluster's CAs;
	// its RESTMapper says which Cluster API version is served.
	Management client.Client
	// Uncached reads MachineDeployments and Machines without a cache of them
	// all: a rotation reads one MachineDeployment per Replace pool.
	Uncached client.Reader
	Clock    clock.PassiveClock
	// Recorder records an event on the Cluster each time a MachineDeployment
	// is rolled.
	Recorder events.EventRecorder
}

// Rollout implements the cluster controller's WorkerRollout.
func (p *ReplaceRollout) Rollout(ctx context.Context, c *v1alpha1.Cluster, pool v1alpha1.WorkerPool) (bool, string, error) {
	if _, wait, err := nodesMayMove(ctx, p.Management, c, pool); err != nil || wait != "" {
		return false, wait, err
	}
	remote, ok := p.Connections.Client(c)
	if !ok {
		return false, fmt.Sprintf("pool %s: waiting to reach the cluster's API server (spec.controlPlane.endpoint)", pool.Name), nil
	}
	mapping, err := p.Management.RESTMapper().RESTMapping(schema.GroupKind{Group: clusterAPIGroup, Kind: kindMachineDeployment})
	if meta.IsNoMatchError(err) {
		return false, fmt.Sprintf("pool %s: the management cluster serves no Cluster API MachineDeployment: install Cluster API, "+
			"or roll the pool and report it with %s=%s%s", pool.Name, v1alpha1.OperationAnnotation, v1alpha1.OperationRolloutWorkersPrefix, pool.Name), nil
	}
	if err != nil {
		return false, "", err
	}
	version := mapping.GroupVersionKind.Version
	fieldPath, ok := rolloutAfterField[version]
	if !ok {
		return false, fmt.Sprintf("pool %s: Cluster API %s is not supported: Carousel rolls MachineDeployments of v1beta2 and v1beta1", pool.Name, version), nil
	}
	md := &unstructured.Unstructured{}
	md.SetGroupVersionKind(mapping.GroupVersionKind)
	key := client.ObjectKey{Namespace: c.Namespace, Name: pool.MachineDeployment}
	if err := p.Uncached.Get(ctx, key, md); apierrors.IsNotFound(err) {
		return false, fmt.Sprintf("pool %s: MachineDeployment %s not found in namespace %s", pool.Name, pool.MachineDeployment, c.Namespace), nil
	} else if err != nil {
		return false, "", fmt.Errorf("reading MachineDeployment %s: %w", pool.MachineDeployment, err)
	}

	request := noderenewal.RequestFor(c.CARotation()).String()
	field, err := rolloutAfter(md, fieldPath)
	if err != nil {
		return false, "", err
	}
	recorded, _ := time.Parse(time.RFC3339, md.GetAnnotations()[v1alpha1.AnnotationRolloutAfter]) // zero when unreadable: rolled again
	after, write := RolloutTime(md.GetAnnotations()[v1alpha1.AnnotationRolledFor], request, recorded, field, p.Clock.Now())
	if write == WriteRoll {
		if wait, err := bootstrapTrustPublished(ctx, p.Management, c, pool); err != nil || wait != "" {
			return false, wait, err
		}
	}
	if write != WriteNothing {
		if err := p.roll(ctx, md, fieldPath, request, after); apierrors.IsConflict(err) {
			return false, fmt.Sprintf("pool %s: MachineDeployment %s changed while Carousel rolled it; reading it again", pool.Name, pool.MachineDeployment), nil
		} else if err != nil {
			return false, "", err
		}
		p.recordRolled(c, pool.Name, md, fieldPath, after, write)
	}

	machines := &unstructured.UnstructuredList{}
	machines.SetGroupVersionKind(schema.GroupVersionKind{Group: clusterAPIGroup, Version: version, Kind: kindMachine + "List"})
	if err := p.Uncached.List(ctx, machines, client.InNamespace(c.Namespace), client.MatchingLabels{labelDeploymentName: pool.MachineDeployment}); err != nil {
		return false, "", fmt.Errorf("listing the Machines of MachineDeployment %s: %w", pool.MachineDeployment, err)
	}
	states := make([]MachineState, len(machines.Items))
	for i := range machines.Items {
		if states[i], err = p.machineState(ctx, remote, &machines.Items[i]); err != nil {
			return false, "", err
		}
	}
	desired, found, err := unstructured.NestedInt64(md.Object, "spec", "replicas")
	if err != nil {
		return false, "", fmt.Errorf("MachineDeployment %s: spec.replicas: %w", pool.MachineDeployment, err)
	}
	if !found {
		desired = 1 // Cluster API's default
	}
	plan := PlanReplace(states, int(desired), after)
	if plan.Done() {
		return true, "", nil
	}
	message := plan.Message(pool.Name, pool.MachineDeployment)
	if len(plan.Old) > 0 {
		held, err := p.replacementHeld(ctx, md, version)
		if err != nil {
			return false, "", err
		}
		if held != "" {
			message += "; Cluster API replaces none now: " + held
		}
	}
	return false, message, nil
}

// recordRolled records that the rollout time of md, pool's MachineDeployment,
// was set to after. The MachineDeployment is the event's related object, or
// the events library would fold the event of a second pool rolled while the
// Cluster is unchanged into the first one's series, note and all.
func (p *ReplaceRollout) recordRolled(c *v1alpha1.Cluster, pool string, md *unstructured.Unstructured, fieldPath []string, after time.Time, write RolloutWrite) {
	note := "set %s of MachineDeployment %s to %s for phase %s: Cluster API replaces every Machine created before it"
	if write == WriteBack {
		note = "set %s of MachineDeployment %s back to %s, where Carousel had set it for phase %s (another writer moved it earlier or cleared it)"
	}
	p.Recorder.Eventf(c, md, corev1.EventTypeNormal, v1alpha1.EventMachineDeploymentRolled, "Reconcile", "pool %s: "+note,
		pool, strings.Join(fieldPath, "."), md.GetName(), after.UTC().Format(time.RFC3339), c.CARotation().Phase)
}

// replacementHeld says why Cluster API replaces no Machine of md now, or ""
// when nothing Carousel can see holds it.
func (p *ReplaceRollout) replacementHeld(ctx context.Context, md *unstructured.Unstructured, version string) (string, error) {
	if held := machineDeploymentHeld(md, version); held != "" {
		return held, nil
	}
	name, _, _ := unstructured.NestedString(md.Object, "spec", "clusterName")
	if name == "" {
		return "", nil
	}
	cluster := &unstructured.Unstructured{}
	cluster.SetGroupVersionKind(schema.GroupVersionKind{Group: clusterAPIGroup, Version: version, Kind: kindCluster})
	if err := p.Uncached.Get(ctx, client.ObjectKey{Namespace: md.GetNamespace(), Name: name}, cluster); apierrors.IsNotFound(err) {
		return fmt.Sprintf("its Cluster API Cluster %s does not exist", name), nil
	} else if err != nil {
		return "", fmt.Errorf("reading Cluster API Cluster %s: %w", name, err)
	}
	paused, _, _ := unstructured.NestedBool(cluster.Object, "spec", "paused")
	_, annotated := cluster.GetAnnotations()[annotationPaused]
	if paused || annotated {
		return fmt.Sprintf("its Cluster API Cluster %s is paused (spec.paused or the %s annotation): resume it", name, annotationPaused), nil
	}
	return "", nil
}

// machineDeploymentHeld says why Cluster API replaces no Machine of md, a
// MachineDeployment of the given Cluster API version, or "".
func machineDeploymentHeld(md *unstructured.Unstructured, version string) string {
	if md.GetDeletionTimestamp() != nil {
		return fmt.Sprintf("MachineDeployment %s is being deleted", md.GetName())
	}
	if paused, _, _ := unstructured.NestedBool(md.Object, "spec", "paused"); paused {
		return fmt.Sprintf("MachineDeployment %s is paused (spec.paused): resume it", md.GetName())
	}
	if _, ok := md.GetAnnotations()[annotationPaused]; ok {
		return fmt.Sprintf("MachineDeployment %s carries the %s annotation: remove it", md.GetName(), annotationPaused)
	}
	if strategy, _, _ := unstructured.NestedString(md.Object, rolloutStrategyField[version]...); strategy == "OnDelete" {
		return fmt.Sprintf("MachineDeployment %s rolls OnDelete, which replaces a Machine only once it is deleted: delete the old Machines", md.GetName())
	}
	return ""
}

// rolloutAfter reads the rollout time set on md; zero when none is.
func rolloutAfter(md *unstructured.Unstructured, field []string) (time.Time, error) {
	value, found, err := unstructured.NestedString(md.Object, field...)
	if err != nil || !found || value == "" {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339, value)
	if err != nil {
		return time.Time{}, fmt.Errorf("MachineDeployment %s: %s: %w", md.GetName(), value, err)
	}
	return t, nil
}

// roll sets the rollout time, the phase it is for and the time itself as
// Carousel's record in one merge patch, on the resourceVersion read: a
// MachineDeployment changed since is read again by the next reconcile.
func (p *ReplaceRollout) roll(ctx context.Context, md *unstructured.Unstructured, field []string, request string, after time.Time) error {
	patch := map[string]any{
		"metadata": map[string]any{
			"resourceVersion": md.GetResourceVersion(),
			"annotations": map[string]any{
				v1alpha1.AnnotationRolledFor:    request,
				v1alpha1.AnnotationRolloutAfter: after.UTC().Format(time.RFC3339),
			},
		},
	}
	if err := unstructured.SetNestedField(patch, after.UTC().Format(time.RFC3339), field...); err != nil {
		return err
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if err := p.Management.Patch(ctx, md, client.RawPatch(types.MergePatchType, data)); err != nil {
		return fmt.Errorf("rolling MachineDeployment %s: %w", md.GetName(), err)
	}
	return nil
}

// machineState reads what PlanReplace needs of a Machine, its Node's
// readiness from the managed cluster.
func (p *ReplaceRollout) machineState(ctx context.Context, remote client.Client, m *unstructured.Unstructured) (MachineState, error) {
	s := MachineState{Name: m.GetName(), Created: m.GetCreationTimestamp().Time, Deleting: m.GetDeletionTimestamp() != nil}
	s.Node, _, _ = unstructured.NestedString(m.Object, "status", "nodeRef", "name")
	if s.Node == "" {
		return s, nil
	}
	node := &corev1.Node{}
	if err := remote.Get(ctx, client.ObjectKey{Name: s.Node}, node); apierrors.IsNotFound(err) {
		return s, nil
	} else if err != nil {
		return s, fmt.Errorf("reading node %s of Machine %s: %w", s.Node, s.Name, err)
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			s.NodeReady = cond.Status == corev1.ConditionTrue
		}
	}
	return s, nil
}

// bootstrapTrustPublished says what a Replace pool's roll waits for before
// Cluster API may create Machines, or "" when they may be: the bootstrap
// kubeconfig they start with (<cluster>-bootstrap-kubeconfig, which the
// kubelet bootstrap controller writes, apart from this one) trusts exactly
// the cluster CAs of now. A Machine created before it does bootstraps with
// the trust of before: in Preparing, the old cluster CA alone, which
// completing locks its kubelet out of; in Finalizing, the old CA it should
// no longer trust.
func bootstrapTrustPublished(ctx context.Context, r client.Reader, c *v1alpha1.Cluster, pool v1alpha1.WorkerPool) (string, error) {
	cas, err := credentials.ReadCAs(ctx, r, c, v1alpha1.CARoleCluster)
	if err != nil {
		return "", err
	}
	name := credentials.BootstrapKubeconfigSecretName(c.Name)
	waiting := fmt.Sprintf("pool %s: waiting for Carousel to publish the phase's cluster CA bundle in the bootstrap kubeconfig (Secret %s)", pool.Name, name)
	s := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, s); apierrors.IsNotFound(err) {
		return waiting, nil
	} else if err != nil {
		return "", fmt.Errorf("reading the bootstrap kubeconfig: %w", err)
	}
	ca, err := kubeconfigCAData(s.Data[v1alpha1.DataKeyKubeconfig])
	if err != nil {
		return waiting + ": " + err.Error(), nil
	}
	if !bytes.Equal(ca, cas.Bundle().PEM()) {
		return waiting, nil
	}
	return "", nil
}

// kubeconfigCAData is the certificate-authority-data of a kubeconfig's
// current cluster. The kubeconfig is only decoded: a Secret in a tenant's
// namespace could name files (a certificate-authority, a client key, a
// token file) that building a client from it would read on the operator's
// machine.
func kubeconfigCAData(data []byte) ([]byte, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, err
	}
	_, cluster, err := bootstrap.CurrentCluster(cfg)
	if err != nil {
		return nil, err
	}
	return cluster.CertificateAuthorityData, nil
}
