package clustercache

import (
	"net/http"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// managedKind is a kind Carousel reads or writes in a managed cluster, with
// its resource and scope.
type managedKind struct {
	gvk        schema.GroupVersionKind
	resource   string
	namespaced bool
}

// managedKinds are every kind Carousel reads or writes in a managed cluster:
// the kubelet CSR controller's (CertificateSigningRequests, Nodes, bootstrap
// token Secrets), the bootstrap objects' (RBAC, cluster-info and the node
// trust ConfigMap), the in-place worker rollout's (Nodes, Leases) and the
// APIService bundle's. All are stable built-in APIs, served by every
// Kubernetes version Carousel supports.
var managedKinds = []managedKind{
	{corev1.SchemeGroupVersion.WithKind("Secret"), "secrets", true},
	{corev1.SchemeGroupVersion.WithKind("ConfigMap"), "configmaps", true},
	{corev1.SchemeGroupVersion.WithKind("Node"), "nodes", false},
	{coordinationv1.SchemeGroupVersion.WithKind("Lease"), "leases", true},
	{certificatesv1.SchemeGroupVersion.WithKind("CertificateSigningRequest"), "certificatesigningrequests", false},
	{rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"), "clusterrolebindings", false},
	{rbacv1.SchemeGroupVersion.WithKind("Role"), "roles", true},
	{rbacv1.SchemeGroupVersion.WithKind("RoleBinding"), "rolebindings", true},
	{apiregistrationv1.SchemeGroupVersion.WithKind("APIService"), "apiservices", false},
}

// restMapper maps managedKinds from a fixed table, and any other kind
// through discovery of the managed API server, on first use (controller-
// runtime's lazy mapper). controller-runtime's mapper alone would hold the
// server's whole aggregated discovery, every group's resources, for each
// managed cluster: about half of what a connection costs the manager.
func restMapper(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	discovered, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return meta.FirstHitRESTMapper{MultiRESTMapper: meta.MultiRESTMapper{staticMapper(), discovered}}, nil
}

// staticMapper maps managedKinds, and nothing else.
func staticMapper() meta.RESTMapper {
	var versions []schema.GroupVersion
	for _, k := range managedKinds {
		versions = append(versions, k.gvk.GroupVersion())
	}
	m := meta.NewDefaultRESTMapper(versions)
	for _, k := range managedKinds {
		scope := meta.RESTScopeRoot
		if k.namespaced {
			scope = meta.RESTScopeNamespace
		}
		m.AddSpecific(k.gvk, k.gvk.GroupVersion().WithResource(k.resource), k.gvk.GroupVersion().WithResource(strings.ToLower(k.gvk.Kind)), scope)
	}
	return m
}
