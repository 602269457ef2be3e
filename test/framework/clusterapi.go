package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	sigsyaml "sigs.k8s.io/yaml"
)

// The CRDs of the test provider (MachineProvider).
//
//go:embed clusterapi/crds.yaml
var providerCRDs []byte

// ClusterAPI is Cluster API's core controller manager, the binary make envtest
// builds from source (bin/k8s/cluster-api-manager), running against the
// management cluster with the CRDs and webhooks of its release, and the test
// provider that turns its Machines into real kubelets of the managed cluster
// (MachineProvider).
type ClusterAPI struct {
	Provider *MachineProvider
	// mu guards manager, which restartManager replaces; managerSpec starts it.
	mu          sync.Mutex
	manager     *process
	managerSpec child
	// webhooks holds the serving certificate's directory, removed by Stop.
	webhooks envtest.WebhookInstallOptions
}

// clusterAPINetwork lets Cluster API's controller manager, which serves its
// webhooks on every address of its host (it has no flag for one), run in
// the managed cluster's network namespace, whose addresses are loopback and
// TEST-NET-1 alone: the management API server, on the host's loopback, is
// forwarded to the same address inside, and webhookAddress, on the host's
// loopback, to the webhooks inside.
func (e *Environment) clusterAPINetwork(webhookAddress string) error {
	management, err := url.Parse(e.Management.Config.Host)
	if err != nil {
		return fmt.Errorf("the management API server's address: %w", err)
	}
	inside, err := e.Netns.Listen("tcp", management.Host)
	if err != nil {
		return fmt.Errorf("forwarding the management API server into the managed cluster's network namespace: %w", err)
	}
	e.Netns.ForwardOut(inside, func() string { return management.Host })
	outside, err := net.Listen("tcp", webhookAddress)
	if err != nil {
		return fmt.Errorf("forwarding Cluster API's webhooks out of the managed cluster's network namespace: %w", err)
	}
	e.Netns.Forward(outside, webhookAddress)
	return nil
}

// StartClusterAPI installs Cluster API's CRDs (every version served, converted
// by its webhook) and webhooks into the management cluster, pointed at a
// loopback port, starts its controller manager there, and the test provider.
func (e *Environment) StartClusterAPI(ctx context.Context) error {
	if e.Netns == nil {
		return fmt.Errorf("cluster API machines are real kubelets: the environment needs its network namespace")
	}
	dir := filepath.Join(e.KubeBinDir, "cluster-api")
	e.logf("installing Cluster API's CRDs and webhooks (%s) and the test provider's CRDs", dir)
	webhooks := envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"}
	var err error
	if webhooks.MutatingWebhooks, webhooks.ValidatingWebhooks, err = clusterAPIWebhooks(filepath.Join(dir, "webhook", "manifests.yaml")); err != nil {
		return err
	}
	err = webhooks.Install(e.Management.Config)
	e.ClusterAPI = &ClusterAPI{webhooks: webhooks}
	if err != nil {
		return fmt.Errorf("installing Cluster API's webhooks: %w", err)
	}
	crds, err := clusterAPICRDs(dir, e.ClusterAPI.webhooks)
	if err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(e.Management.Config, envtest.CRDInstallOptions{CRDs: crds}); err != nil {
		return fmt.Errorf("installing Cluster API's CRDs: %w", err)
	}
	address := net.JoinHostPort(webhooks.LocalServingHost, strconv.Itoa(webhooks.LocalServingPort))
	if err := e.clusterAPINetwork(address); err != nil {
		return err
	}
	e.logf("starting Cluster API's controller manager in the managed cluster's network namespace (webhooks on %s)", address)
	binary, args := e.Netns.Wrap(filepath.Join(e.KubeBinDir, "cluster-api-manager"),
		"--kubeconfig="+e.ManagementKubeconfig, "--webhook-port="+strconv.Itoa(webhooks.LocalServingPort),
		"--webhook-cert-dir="+webhooks.LocalServingCertDir, "--health-addr=0", "--diagnostics-address=0", "--leader-elect=false",
		// Nothing in the managed cluster changes Machines' Nodes but
		// kubelets: a resync a minute at most, not ten.
		"--sync-period=1m")
	e.ClusterAPI.managerSpec = child{
		name: "cluster-api-manager", binary: binary,
		logPath: filepath.Join(e.WorkDir, "cluster-api-manager.log"),
		args:    fixedArgs(args...),
		ready: func(ctx context.Context) (bool, error) {
			conn, err := (&tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}}).DialContext(ctx, "tcp", address) //nolint:gosec // only checks that it serves
			if err != nil {
				return false, nil
			}
			_ = conn.Close()
			return true, nil
		},
		timeout: 2 * time.Minute,
	}
	if e.ClusterAPI.manager, err = startChild(ctx, e.ClusterAPI.managerSpec); err != nil {
		return err
	}
	e.logf("starting the test provider: a real kubelet per Machine")
	e.ClusterAPI.Provider = &MachineProvider{Environment: e}
	return e.ClusterAPI.Provider.Start(ctx)
}

// clusterAPIWebhooks reads the release's webhook configurations, named as
// its kustomization names them (capi-…): unprefixed, the validating one has
// the name of Carousel's and would replace it.
func clusterAPIWebhooks(path string) ([]*admissionregistrationv1.MutatingWebhookConfiguration, []*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: run make envtest", err)
	}
	var mutating []*admissionregistrationv1.MutatingWebhookConfiguration
	var validating []*admissionregistrationv1.ValidatingWebhookConfiguration
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta metav1.TypeMeta
		if err := sigsyaml.Unmarshal([]byte(doc), &meta); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		var obj metav1.Object
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			mutating, obj = append(mutating, m), m
		case "ValidatingWebhookConfiguration":
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			validating, obj = append(validating, v), v
		default:
			continue
		}
		if err := sigsyaml.Unmarshal([]byte(doc), obj); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		obj.SetName("capi-" + obj.GetName())
	}
	if len(mutating) == 0 || len(validating) == 0 {
		return nil, nil, fmt.Errorf("%s: want a mutating and a validating webhook configuration", path)
	}
	return mutating, validating, nil
}

// clusterAPICRDs reads the release's CRDs, each with more than one version
// converted by the manager's webhook (as the release's kustomize patches set
// it up, at a Service), and the test provider's.
func clusterAPICRDs(dir string, webhooks envtest.WebhookInstallOptions) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no Cluster API CRDs in %s: run make envtest", dir)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		read, err := decodeCRDs(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		crds = append(crds, read...)
	}
	convert := "https://" + net.JoinHostPort(webhooks.LocalServingHost, strconv.Itoa(webhooks.LocalServingPort)) + "/convert"
	for _, crd := range crds {
		if len(crd.Spec.Versions) < 2 {
			continue
		}
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
			Strategy: apiextensionsv1.WebhookConverter,
			Webhook: &apiextensionsv1.WebhookConversion{
				ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: ptr.To(convert), CABundle: webhooks.LocalServingCAData},
				ConversionReviewVersions: []string{"v1"},
			},
		}
	}
	provider, err := decodeCRDs(providerCRDs)
	if err != nil {
		return nil, fmt.Errorf("the test provider's CRDs: %w", err)
	}
	return append(crds, provider...), nil
}

// decodeCRDs decodes a multi-document YAML of CRDs.
func decodeCRDs(data []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	decoder := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := decoder.Decode(crd); err != nil {
			if errors.Is(err, io.EOF) {
				return crds, nil
			}
			return nil, err
		}
		if crd.Name != "" {
			crds = append(crds, crd)
		}
	}
}

// Stop stops the provider's machines and the controller manager.
func (c *ClusterAPI) Stop() {
	if c.Provider != nil {
		c.Provider.Stop()
	}
	c.mu.Lock()
	stop(c.manager)
	c.manager = nil
	c.mu.Unlock()
	_ = c.webhooks.Cleanup()
}

// restartManager restarts Cluster API's controller manager, unless Stop
// stopped it. Its ClusterCache keeps a workload cluster's connection, and the
// credentials it was made with, until they are refused
// (kubernetes-sigs/cluster-api#12399): a platform that renews the kubeconfig
// Secret restarts it, as a reloader of the Deployment would, so that it moves
// to the new credentials before the old ones are dropped.
func (c *ClusterAPI) restartManager(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.manager == nil {
		return nil
	}
	stop(c.manager)
	var err error
	c.manager, err = startChild(ctx, c.managerSpec)
	return err
}

// CreateMachineDeployment creates, in the Cluster's namespace, the Cluster API
// Cluster of the managed cluster (with its TestCluster and TestControlPlane)
// when there is none yet, and a MachineDeployment of replicas Machines of the
// test provider whose nodes register in pool. Each Machine bootstraps as a
// kubelet of the managed cluster with a token of its own.
func (e *Environment) CreateMachineDeployment(ctx context.Context, name, pool string, replicas int64) error {
	ns, cluster := e.Namespace, e.Name
	ref := func(kind, name string) map[string]any {
		return map[string]any{"apiGroup": providerGroup, "kind": kind, "name": name}
	}
	labels := map[string]any{clusterAPIGroup + "/cluster-name": cluster, LabelDeploymentName: name}
	endpoint, err := url.Parse(e.ControlPlane.Endpoint())
	if err != nil {
		return err
	}
	port, err := strconv.ParseInt(endpoint.Port(), 10, 32)
	if err != nil {
		return err
	}
	objects := []*unstructured.Unstructured{
		object(providerGVK("TestCluster"), ns, cluster, nil),
		object(providerGVK("TestControlPlane"), ns, cluster, nil),
		object(ClusterAPIGVK("Cluster"), ns, cluster, map[string]any{
			"controlPlaneEndpoint": map[string]any{"host": endpoint.Hostname(), "port": port},
			"infrastructureRef":    ref("TestCluster", cluster),
			"controlPlaneRef":      ref("TestControlPlane", cluster),
		}),
		object(providerGVK("TestMachineTemplate"), ns, name, map[string]any{"template": map[string]any{"spec": map[string]any{"pool": pool}}}),
		object(providerGVK("TestBootstrapConfigTemplate"), ns, name, map[string]any{"template": map[string]any{"spec": map[string]any{}}}),
		object(ClusterAPIGVK("MachineDeployment"), ns, name, map[string]any{
			"clusterName": cluster,
			"replicas":    replicas,
			"selector":    map[string]any{"matchLabels": labels},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec": map[string]any{
					"clusterName": cluster,
					// The kubelets' version: Cluster API compares it with the Node's.
					"version":           "v" + e.Cluster.Spec.KubernetesVersion,
					"bootstrap":         map[string]any{"configRef": ref("TestBootstrapConfigTemplate", name)},
					"infrastructureRef": ref("TestMachineTemplate", name),
				},
			},
		}),
	}
	for _, obj := range objects {
		if err := e.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// object returns an object of gvk with spec.
func object(gvk schema.GroupVersionKind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	if spec == nil {
		obj.Object["spec"] = map[string]any{}
	}
	obj.SetGroupVersionKind(gvk)
	obj.SetNamespace(namespace)
	obj.SetName(name)
	return obj
}
