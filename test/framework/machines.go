package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// The test provider's API group and kinds (clusterapi/crds.yaml), and the
// Cluster API objects it works with.
const (
	providerGroup   = "test.carousel.dev"
	providerVersion = "v1alpha1"
	clusterAPIGroup = "cluster.x-k8s.io"
	// LabelDeploymentName is the label Cluster API puts on the Machines of a
	// MachineDeployment: its name.
	LabelDeploymentName = clusterAPIGroup + "/deployment-name"
	clusterAPIV         = "v1beta2"
	// machineFinalizer keeps a TestMachine until its kubelet stopped.
	machineFinalizer = providerGroup + "/machine"
	// providerIDPrefix starts the providerID of every node of the provider.
	providerIDPrefix = "carousel-test://"
	// firstMachineIP and lastMachineIP bound the last octet of the machines'
	// addresses; NodeIP's nodes come before them.
	firstMachineIP, lastMachineIP = 100, 254
	// bootstrapTokenTTL is how long a Machine's bootstrap token is valid.
	bootstrapTokenTTL = time.Hour
)

func providerGVK(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: providerGroup, Version: providerVersion, Kind: kind}
}

// ClusterAPIGVK is a kind of Cluster API's v1beta2, which the environment's
// Cluster API serves and stores.
func ClusterAPIGVK(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: clusterAPIGroup, Version: clusterAPIV, Kind: kind}
}

// bootstrapData is what a TestBootstrapConfig's data Secret holds under
// "value", in place of a cloud-init document: what the machine's
// provisioning writes before its kubelet first starts.
type bootstrapData struct {
	BootstrapKubeconfig []byte `json:"bootstrapKubeconfig"`
	KubeletCABundle     []byte `json:"kubeletCABundle"`
}

// MachineProvider is the e2e suite's Cluster API provider, in the test
// process: infrastructure (TestCluster, TestMachine), bootstrap
// (TestBootstrapConfig) and control plane (TestControlPlane) of the
// environment's one managed cluster.
//
//   - A TestBootstrapConfig gets a bootstrap token of its own in the managed
//     cluster, in Carousel's group, and a data Secret with a bootstrap
//     kubeconfig on it (Carousel's, server and trust bundle, with that
//     token) and the kubelet CA bundle Carousel publishes.
//   - A TestMachine whose Machine has its bootstrap data becomes a real
//     kubelet (KubeletNode) on an address of its own, with the Machine's name
//     and providerID; it stops when the TestMachine is deleted.
//   - The TestCluster is provisioned at once; the TestControlPlane is
//     initialized and externally managed (so that Cluster API drains and
//     deletes a deleted Machine's Node), and keeps the Cluster API
//     kubeconfig Secret on Carousel's current admin credentials.
type MachineProvider struct {
	*Environment

	cancel  context.CancelFunc
	stopped chan struct{}

	mu       sync.Mutex
	machines map[string]*KubeletNode
	nextIP   int
	stopping bool
}

// Start runs the provider's controllers until Stop.
func (p *MachineProvider) Start(ctx context.Context) error {
	p.machines, p.nextIP = map[string]*KubeletNode{}, firstMachineIP
	mgr, err := ctrl.NewManager(p.Management.Config, ctrl.Options{
		Scheme:                 scheme.New(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	for kind, reconcile := range map[string]func(context.Context, *unstructured.Unstructured) (time.Duration, error){
		"TestCluster":         p.provisionCluster,
		"TestControlPlane":    p.initializeControlPlane,
		"TestBootstrapConfig": p.writeBootstrapData,
		"TestMachine":         p.runMachine,
	} {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(providerGVK(kind))
		r := &unstructuredReconciler{client: mgr.GetClient(), gvk: providerGVK(kind), reconcile: reconcile}
		if err := ctrl.NewControllerManagedBy(mgr).Named("test-provider-" + kind).For(obj).Complete(r); err != nil {
			return err
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	p.cancel, p.stopped = cancel, make(chan struct{})
	go func() {
		defer close(p.stopped)
		if err := mgr.Start(runCtx); err != nil {
			p.logf("the test provider stopped: %v", err)
		}
	}()
	return nil
}

// Stop stops the controllers, then every machine's kubelet.
func (p *MachineProvider) Stop() {
	if p.cancel == nil {
		return
	}
	p.mu.Lock()
	p.stopping = true // no machine starts after this
	p.mu.Unlock()
	p.cancel()
	<-p.stopped
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.machines {
		n.Stop()
	}
}

// Machines returns the kubelets of the machines that run now, by name.
func (p *MachineProvider) Machines() map[string]*KubeletNode {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]*KubeletNode, len(p.machines))
	for name, n := range p.machines {
		out[name] = n
	}
	return out
}

// unstructuredReconciler runs one of the provider's reconcile functions on
// objects of one kind, and writes back what it changed in the status.
type unstructuredReconciler struct {
	client    client.Client
	gvk       schema.GroupVersionKind
	reconcile func(context.Context, *unstructured.Unstructured) (time.Duration, error)
}

func (r *unstructuredReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.gvk)
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	after, err := r.reconcile(ctx, obj)
	return ctrl.Result{RequeueAfter: after}, err
}

// setStatus merges fields into the object's status.
func (p *MachineProvider) setStatus(ctx context.Context, obj *unstructured.Unstructured, status map[string]any) error {
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	return p.Client.Status().Patch(ctx, obj, client.RawPatch("application/merge-patch+json", patch))
}

func (p *MachineProvider) provisionCluster(ctx context.Context, obj *unstructured.Unstructured) (time.Duration, error) {
	if provisioned, _, _ := unstructured.NestedBool(obj.Object, "status", "initialization", "provisioned"); provisioned {
		return 0, nil
	}
	return 0, p.setStatus(ctx, obj, map[string]any{"initialization": map[string]any{"provisioned": true}})
}

// initializeControlPlane reports the control plane initialized and
// externally managed, and keeps the kubeconfig Secret Cluster API reaches
// the managed cluster with (<cluster>-kubeconfig, "value") on Carousel's
// current admin kubeconfig: it polls, as Carousel renews that credential
// during a rotation.
func (p *MachineProvider) initializeControlPlane(ctx context.Context, obj *unstructured.Unstructured) (time.Duration, error) {
	const poll = 2 * time.Second
	admin := &corev1.Secret{}
	key := client.ObjectKey{Namespace: p.Namespace, Name: credentials.CertificateSecretName(p.Name, credentials.CertAdmin)}
	if err := p.Client.Get(ctx, key, admin); err != nil {
		return 0, err
	}
	kubeconfig := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: obj.GetName() + "-kubeconfig"}}
	renewed, err := controllerutil.CreateOrPatch(ctx, p.Client, kubeconfig, func() error {
		kubeconfig.Labels = map[string]string{clusterAPIGroup + "/cluster-name": obj.GetName()}
		kubeconfig.Data = map[string][]byte{"value": admin.Data[v1alpha1.DataKeyKubeconfig]}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if renewed == controllerutil.OperationResultUpdated {
		p.logf("Carousel renewed the admin kubeconfig: restarting Cluster API's controller manager, which keeps a connection's credentials until they are refused")
		if err := p.ClusterAPI.restartManager(ctx); err != nil {
			return 0, fmt.Errorf("restarting Cluster API's controller manager: %w", err)
		}
	}
	if initialized, _, _ := unstructured.NestedBool(obj.Object, "status", "initialization", "controlPlaneInitialized"); initialized {
		return poll, nil
	}
	return poll, p.setStatus(ctx, obj, map[string]any{
		"initialization":              map[string]any{"controlPlaneInitialized": true},
		"externalManagedControlPlane": true,
	})
}

// writeBootstrapData gives a TestBootstrapConfig a bootstrap token of its own
// and the data Secret its machine is provisioned from, once.
func (p *MachineProvider) writeBootstrapData(ctx context.Context, obj *unstructured.Unstructured) (time.Duration, error) {
	if created, _, _ := unstructured.NestedBool(obj.Object, "status", "initialization", "dataSecretCreated"); created {
		return 0, nil
	}
	carousels := &corev1.Secret{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: credentials.BootstrapKubeconfigSecretName(p.Name)}, carousels); err != nil {
		return 0, err
	}
	template, err := clientcmd.Load(carousels.Data[v1alpha1.DataKeyKubeconfig])
	if err != nil {
		return 0, fmt.Errorf("the bootstrap kubeconfig Carousel publishes: %w", err)
	}
	var server string
	var caBundle []byte
	for _, cluster := range template.Clusters {
		server, caBundle = cluster.Server, cluster.CertificateAuthorityData
	}
	kubeletCA := &corev1.ConfigMap{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: credentials.BundleConfigMapName(p.Name, v1alpha1.CARoleKubelet)}, kubeletCA); err != nil {
		return 0, err
	}
	token, err := bootstrap.NewToken(bootstrapTokenTTL, time.Now())
	if err != nil {
		return 0, err
	}
	managed, err := p.Platform.managedAdmin(ctx)
	if err != nil {
		return 0, err
	}
	if err := managed.Create(ctx, bootstrap.TokenSecret(p.Name, token)); err != nil {
		return 0, fmt.Errorf("creating the bootstrap token of %s: %w", obj.GetName(), err)
	}
	kubeconfig, err := bootstrap.Kubeconfig(server, caBundle, token)
	if err != nil {
		return 0, err
	}
	value, err := json.Marshal(bootstrapData{BootstrapKubeconfig: kubeconfig, KubeletCABundle: []byte(kubeletCA.Data[v1alpha1.DataKeyCABundle])})
	if err != nil {
		return 0, err
	}
	data := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: obj.GetName(),
			Labels: map[string]string{clusterAPIGroup + "/cluster-name": p.Name}},
		Type: clusterAPIGroup + "/secret",
		Data: map[string][]byte{"value": value, "format": []byte("carousel-test")},
	}
	if err := controllerutil.SetOwnerReference(obj, data, p.Client.Scheme()); err != nil {
		return 0, err
	}
	if err := p.Client.Create(ctx, data); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, err
	}
	return 0, p.setStatus(ctx, obj, map[string]any{
		"dataSecretName": data.Name, "initialization": map[string]any{"dataSecretCreated": true},
	})
}

// runMachine starts a TestMachine's kubelet once its Machine's bootstrap
// data exists, and stops it when the TestMachine is deleted.
func (p *MachineProvider) runMachine(ctx context.Context, obj *unstructured.Unstructured) (time.Duration, error) {
	name := obj.GetName()
	if !obj.GetDeletionTimestamp().IsZero() {
		p.mu.Lock()
		if n, ok := p.machines[name]; ok {
			p.logf("stopping machine %s", name)
			n.Stop()
			delete(p.machines, name)
		}
		p.mu.Unlock()
		if controllerutil.RemoveFinalizer(obj, machineFinalizer) {
			return 0, p.Client.Update(ctx, obj)
		}
		return 0, nil
	}
	if controllerutil.AddFinalizer(obj, machineFinalizer) {
		return 0, p.Client.Update(ctx, obj) // the update comes back as an event
	}
	if provisioned, _, _ := unstructured.NestedBool(obj.Object, "status", "initialization", "provisioned"); provisioned {
		return 0, nil
	}
	machine, err := p.ownerMachine(ctx, obj)
	if err != nil || machine == nil {
		return time.Second, err
	}
	secretName, _, _ := unstructured.NestedString(machine.Object, "spec", "bootstrap", "dataSecretName")
	if secretName == "" {
		return time.Second, nil // Cluster API copies it from the bootstrap config
	}
	secret := &corev1.Secret{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: secretName}, secret); err != nil {
		return 0, err
	}
	var data bootstrapData
	if err := json.Unmarshal(secret.Data["value"], &data); err != nil {
		return 0, fmt.Errorf("bootstrap data %s: %w", secretName, err)
	}
	pool, _, _ := unstructured.NestedString(obj.Object, "spec", "pool")

	n, err := p.startMachine(ctx, name, pool, data)
	if err != nil {
		return 0, err
	}
	patch := client.MergeFrom(obj.DeepCopy())
	if err := unstructured.SetNestedField(obj.Object, n.ProviderID, "spec", "providerID"); err != nil {
		return 0, err
	}
	if err := p.Client.Patch(ctx, obj, patch); err != nil {
		return 0, err
	}
	return 0, p.setStatus(ctx, obj, map[string]any{
		"initialization": map[string]any{"provisioned": true},
		"addresses":      []any{map[string]any{"type": "InternalIP", "address": n.IP}},
	})
}

// startMachine starts the kubelet of a machine, on the next free address,
// unless it runs already; a machine that failed to start is forgotten, and
// started again on the next attempt.
func (p *MachineProvider) startMachine(ctx context.Context, name, pool string, data bootstrapData) (*KubeletNode, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, running := p.machines[name]; running {
		return n, nil
	}
	if p.stopping {
		return nil, fmt.Errorf("the provider is stopping: machine %s does not start", name)
	}
	if p.nextIP > lastMachineIP {
		return nil, fmt.Errorf("no address left for machine %s: the provider gives out 192.0.2.%d to 192.0.2.%d", name, firstMachineIP, lastMachineIP)
	}
	n := &KubeletNode{Name: name, IP: fmt.Sprintf("192.0.2.%d", p.nextIP), Pool: pool, ProviderID: providerIDPrefix + name,
		Dir: filepath.Join(p.WorkDir, "machines", name), BinDir: p.KubeBinDir, Netns: p.Netns}
	p.nextIP++ // never reused: an address that failed to start may be on the device already
	p.logf("starting machine %s: kubelet on %s, bootstrapping with a token of its own", name, n.IP)
	if err := p.Netns.AddAddress(ctx, n.IP); err != nil {
		return nil, err
	}
	if err := n.Provision(data.BootstrapKubeconfig, data.KubeletCABundle); err != nil {
		return nil, err
	}
	if err := n.Start(ctx); err != nil {
		n.Stop()
		return nil, err
	}
	p.machines[name] = n
	return n, nil
}

// ownerMachine returns the Machine that owns a TestMachine, nil until
// Cluster API set the owner reference.
func (p *MachineProvider) ownerMachine(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Kind != "Machine" {
			continue
		}
		m := &unstructured.Unstructured{}
		m.SetGroupVersionKind(ClusterAPIGVK("Machine"))
		if err := p.Client.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: ref.Name}, m); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		return m, nil
	}
	return nil, nil
}
