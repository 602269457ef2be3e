package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// metrics-server is the managed cluster's aggregated API server: the real
// sigs.k8s.io/metrics-server, serving metrics.k8s.io with the certificate
// Carousel issues for the metrics-server role, authenticating the
// aggregator's proxied requests through the front-proxy CA the API server
// publishes in kube-system/extension-apiserver-authentication, and scraping
// the kubelets over their serving certificates. It runs in the network
// namespace as a pod would, on a service-account token, and is reached
// through a Service without selector whose EndpointSlice points at it
// (kube-apiserver --enable-aggregator-routing).
const (
	// MetricsServerWorkload is the platform's Deployment of metrics-server.
	MetricsServerWorkload = "metrics-server"
	// MetricsAPIService is the APIService metrics-server serves; it carries
	// the label that has Carousel keep its caBundle.
	MetricsAPIService = "v1beta1.metrics.k8s.io"

	metricsServerName      = "metrics-server"
	metricsServerNamespace = metav1.NamespaceSystem
	metricsServerPortName  = "https"
	// metricsServerDrain is how long an instance taken out of the
	// EndpointSlice keeps serving before it is stopped: the preStop delay of
	// a Deployment that lets the API server's endpoint watch see it gone.
	metricsServerDrain = 2 * time.Second
	// metricsServerTokenLifetime is the lifetime of the service-account
	// token minted at each start.
	metricsServerTokenLifetime = 24 * time.Hour
)

// metricsServerPorts are where an instance listens at ControlPlaneIP: a
// rollout starts the new instance on the port the old one does not use, as a
// Deployment with maxUnavailable 0 starts the new pod before it stops the old.
var metricsServerPorts = [2]int{4443, 4444}

// InstallMetricsServer creates in the managed cluster what metrics-server's
// manifests do: its ServiceAccount and RBAC, the Service, and the APIService
// labelled carousel.dev/ca-bundle=metrics-server, without a caBundle:
// Carousel writes it. Objects that exist are left as they are.
func InstallMetricsServer(ctx context.Context, c client.Client) error {
	ns := metricsServerNamespace
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: metricsServerName}
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: metricsServerName}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:metrics-server"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:metrics-server"}, Subjects: []rbacv1.Subject{sa},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:metrics-server"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server:system:auth-delegator"}, Subjects: []rbacv1.Subject{sa},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "metrics-server-auth-reader"}, Subjects: []rbacv1.Subject{sa},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: metricsServerName}, Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: metricsServerPortName, Port: 443, TargetPort: intstr.FromString(metricsServerPortName)}}}},
		&apiregistrationv1.APIService{
			ObjectMeta: metav1.ObjectMeta{Name: MetricsAPIService, Labels: map[string]string{v1alpha1.LabelCABundle: string(v1alpha1.CARoleMetricsServer)}},
			Spec: apiregistrationv1.APIServiceSpec{Group: "metrics.k8s.io", Version: "v1beta1", GroupPriorityMinimum: 100, VersionPriority: 100,
				Service: &apiregistrationv1.ServiceReference{Namespace: ns, Name: metricsServerName, Port: ptr.To[int32](443)}},
		},
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

// StartMetricsServer rolls metrics-server out on the credential files as they
// are now: a new instance, on a fresh service-account token, starts on the
// other port and, once ready, takes the EndpointSlice over; the old one,
// if any, serves on for the drain delay and is then stopped. c is an admin
// client of the managed cluster.
func (m *ManagedControlPlane) StartMetricsServer(ctx context.Context, c client.Client) error {
	if m.Netns == nil {
		return fmt.Errorf("metrics-server needs the network namespace: an APIService cannot point at loopback")
	}
	port := metricsServerPorts[0]
	if int(m.metricsServerPort.Load()) == port {
		port = metricsServerPorts[1]
	}
	files := m.podFiles(fmt.Sprintf("metrics-server-%d", port))
	f := files.file
	kubeconfig, err := m.writeMetricsServerKubeconfig(ctx, c, files)
	if err != nil {
		return err
	}
	address := net.JoinHostPort(ControlPlaneIP, strconv.Itoa(port))
	args := []string{"--bind-address=" + ControlPlaneIP, "--secure-port=" + strconv.Itoa(port), "--cert-dir=" + m.file("metrics-server-certs"),
		"--tls-cert-file=" + f("metrics-server.crt"), "--tls-private-key-file=" + f("metrics-server.key"),
		"--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--kubelet-certificate-authority=" + f("metrics-server-kubelet-ca.crt"),
		"--kubelet-preferred-address-types=InternalIP", "--kubelet-use-node-status-port",
		// The shortest resolution metrics-server allows, so that node
		// metrics are there soon after a start.
		"--metric-resolution=10s", "--kubelet-request-timeout=5s"}
	if files.err != nil {
		return files.err
	}
	p, err := m.start(ctx, "metrics-server", m.metricsServerReady(address), nil, args...)
	if err != nil {
		return err
	}
	if err := pointEndpointSlice(ctx, c, port); err != nil {
		stop(p)
		return err
	}
	old := m.metricsServer
	m.metricsServer = p
	m.metricsServerPort.Store(int32(port))
	if old != nil {
		select {
		case <-ctx.Done():
		case <-time.After(metricsServerDrain):
		}
		stop(old)
	}
	return nil
}

// metricsServerReady returns a condition that holds once the instance at
// address serves the aggregator: it answers the API server's availability
// check, a discovery request authenticated as the aggregator does it (the
// front-proxy client certificate and X-Remote-User), which needs the
// front-proxy CA it reads from extension-apiserver-authentication. Its
// /readyz answers ok before it has read that CA, and leaves out its metric
// storage on purpose: that is filled only by scrapes of node and pod metrics,
// and the fake container runtime's pods have none.
func (m *ManagedControlPlane) metricsServerReady(address string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		pair, err := tls.LoadX509KeyPair(m.file("front-proxy-client.crt"), m.file("front-proxy-client.key"))
		if err != nil {
			return false, err
		}
		return answersOK(ctx, m.readinessTransport(pair), "https://"+address+"/apis/metrics.k8s.io/v1beta1", http.Header{"X-Remote-User": {"system:kube-aggregator"}})
	}
}

// StopMetricsServer stops metrics-server, if it runs, and waits for it to exit.
func (m *ManagedControlPlane) StopMetricsServer() { stop(m.metricsServer); m.metricsServer = nil }

// writeMetricsServerKubeconfig writes, into the pod's files, what a pod of
// metrics-server would get: a service-account token, minted through the
// TokenRequest API, and the API server's address in the namespace, trusted
// through the mounted cluster CA bundle. It returns the kubeconfig's path.
func (m *ManagedControlPlane) writeMetricsServerKubeconfig(ctx context.Context, c client.Client, files *podFiles) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: metricsServerNamespace, Name: metricsServerName}}
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(metricsServerTokenLifetime.Seconds()))}}
	if err := c.SubResource("token").Create(ctx, sa, request); err != nil {
		return "", fmt.Errorf("minting metrics-server's service-account token: %w", err)
	}
	ca := files.file("metrics-server-cluster-ca.crt")
	if files.err != nil {
		return "", files.err
	}
	token := filepath.Join(files.dir, "token")
	if err := writeFileAtomic(token, []byte(request.Status.Token)); err != nil {
		return "", err
	}
	config := clientcmdapi.NewConfig()
	config.Clusters["managed"] = &clientcmdapi.Cluster{
		Server:               "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(m.APIServerPort)),
		CertificateAuthority: ca,
	}
	config.AuthInfos[metricsServerName] = &clientcmdapi.AuthInfo{TokenFile: token}
	config.Contexts["managed"] = &clientcmdapi.Context{Cluster: "managed", AuthInfo: metricsServerName}
	config.CurrentContext = "managed"
	data, err := clientcmd.Write(*config)
	if err != nil {
		return "", err
	}
	kubeconfig := filepath.Join(files.dir, "kubeconfig")
	return kubeconfig, writeFileAtomic(kubeconfig, data)
}

// pointEndpointSlice makes the metrics-server Service's EndpointSlice name
// ControlPlaneIP:port, creating it the first time.
func pointEndpointSlice(ctx context.Context, c client.Client, port int) error {
	want := discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: metricsServerNamespace, Name: metricsServerName, Labels: map[string]string{
			discoveryv1.LabelServiceName: metricsServerName, discoveryv1.LabelManagedBy: "carousel-e2e-platform"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ControlPlaneIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(metricsServerPortName), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	have := &discoveryv1.EndpointSlice{}
	err := c.Get(ctx, client.ObjectKeyFromObject(&want), have)
	if apierrors.IsNotFound(err) {
		return c.Create(ctx, &want)
	}
	if err != nil {
		return err
	}
	have.Labels, have.Endpoints, have.Ports = want.Labels, want.Endpoints, want.Ports
	return c.Update(ctx, have)
}

// MetricsServerAddress is where metrics-server listens in the network
// namespace now.
func (m *ManagedControlPlane) MetricsServerAddress() string {
	return net.JoinHostPort(ControlPlaneIP, strconv.Itoa(int(m.metricsServerPort.Load())))
}
