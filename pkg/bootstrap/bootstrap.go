// Package bootstrap builds the objects of kubelet TLS bootstrapping that
// Carousel keeps in a managed cluster: bootstrap tokens, the RBAC bindings of
// the flow, the published cluster-info (with a JWS signature per token, as
// kube-controller-manager's bootstrapsigner writes it) and the node trust
// ConfigMap. The functions are pure; the managed-cluster controller writes
// what they return.
package bootstrap

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/token/jws"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	bootstrapsecretutil "k8s.io/cluster-bootstrap/util/secrets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// Group is the extra group of a Cluster's bootstrap tokens; the approver
// approves first-bootstrap CSRs only from users in it.
func Group(cluster string) string { return "system:bootstrappers:carousel:" + cluster }

// Token is a bootstrap token: "<id>.<secret>".
type Token struct {
	ID, Secret string
	Expires    time.Time
}

// String is the token as a kubeconfig or kubelet expects it.
func (t Token) String() string { return bootstraputil.TokenFromIDAndSecret(t.ID, t.Secret) }

// NewToken generates a token that expires ttl after now.
func NewToken(ttl time.Duration, now time.Time) (Token, error) {
	raw, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return Token{}, err
	}
	id, secret := raw[:bootstrapapi.BootstrapTokenIDBytes], raw[bootstrapapi.BootstrapTokenIDBytes+1:]
	return Token{ID: id, Secret: secret, Expires: now.Add(ttl).UTC().Truncate(time.Second)}, nil
}

// TokenSecret is the kube-system Secret that makes the API server accept the
// token. Its usages are authentication and signing: Carousel signs
// kube-public/cluster-info with it (kube-controller-manager's bootstrapsigner
// signs only tokens with usage-bootstrap-signing).
func TokenSecret(cluster string, t Token) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(t.ID),
			Labels: map[string]string{v1alpha1.LabelBootstrapToken: cluster},
		},
		Type: bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			bootstrapapi.BootstrapTokenIDKey:               t.ID,
			bootstrapapi.BootstrapTokenSecretKey:           t.Secret,
			bootstrapapi.BootstrapTokenExpirationKey:       t.Expires.Format(time.RFC3339),
			bootstrapapi.BootstrapTokenDescriptionKey:      "kubelet bootstrap token issued by Carousel for cluster " + cluster,
			bootstrapapi.BootstrapTokenUsageAuthentication: "true",
			bootstrapapi.BootstrapTokenUsageSigningKey:     "true",
			bootstrapapi.BootstrapTokenExtraGroupsKey:      Group(cluster),
		},
	}
}

// ParseTokenSecret reads a bootstrap-token Secret of cluster's: one the API
// server authenticates (named after its token ID, of the bootstrap-token
// type, usable for authentication), into the Cluster's bootstrap group.
// The Secret is in the managed cluster, which its tenant writes: one that
// does not hold all of that must not be handed to new nodes, nor stand for
// another Secret.
func ParseTokenSecret(cluster string, s *corev1.Secret) (Token, error) {
	t := Token{ID: string(s.Data[bootstrapapi.BootstrapTokenIDKey]), Secret: string(s.Data[bootstrapapi.BootstrapTokenSecretKey])}
	if !bootstraputil.IsValidBootstrapToken(t.String()) {
		return Token{}, fmt.Errorf("secret %s does not hold a valid bootstrap token", s.Name)
	}
	if s.Name != bootstrapapi.BootstrapTokenSecretPrefix+t.ID {
		return Token{}, fmt.Errorf("secret %s holds token %s: the API server authenticates a token only by the Secret named after it", s.Name, t.ID)
	}
	if s.Type != bootstrapapi.SecretTypeBootstrapToken || string(s.Data[bootstrapapi.BootstrapTokenUsageAuthentication]) != "true" {
		return Token{}, fmt.Errorf("secret %s is not a bootstrap token usable for authentication (type %s, %s=%q)", s.Name, s.Type,
			bootstrapapi.BootstrapTokenUsageAuthentication, s.Data[bootstrapapi.BootstrapTokenUsageAuthentication])
	}
	if s.DeletionTimestamp != nil {
		return Token{}, fmt.Errorf("secret %s is being deleted: the API server no longer authenticates its token", s.Name)
	}
	// The groups as the API server's bootstrap authenticator reads them: it
	// refuses the token if any of them is not a valid bootstrap group name.
	groups, err := bootstrapsecretutil.GetGroups(s)
	if err != nil {
		return Token{}, fmt.Errorf("secret %s: the API server does not authenticate its token: %w", s.Name, err)
	}
	if !slices.Contains(groups, Group(cluster)) {
		return Token{}, fmt.Errorf("secret %s does not put its nodes in group %s", s.Name, Group(cluster))
	}
	expires, err := time.Parse(time.RFC3339, string(s.Data[bootstrapapi.BootstrapTokenExpirationKey]))
	if err != nil {
		return Token{}, fmt.Errorf("secret %s: expiration: %w", s.Name, err)
	}
	t.Expires = expires
	return t, nil
}

// Kept says whether Carousel keeps t at now, for a Cluster whose tokens
// live ttl: unexpired, and valid for no longer than ttl (and a minute for a
// clock that went back) from now. One valid for longer had its expiration
// written for a longer TTL than the Cluster now has, or not by Carousel (it
// is in the managed cluster, which its tenant writes).
func (t Token) Kept(ttl time.Duration, now time.Time) bool {
	return now.Before(t.Expires) && !t.Expires.After(now.Add(ttl+time.Minute))
}

// TokenPlan sorts tokens into those to keep (Kept) and those to delete. It
// says whether to create a new token: when no kept one has more than a third
// of ttl left.
func TokenPlan(tokens []Token, ttl time.Duration, now time.Time) (keep, drop []Token, create bool) {
	create = true
	for _, t := range tokens {
		if !t.Kept(ttl, now) {
			drop = append(drop, t)
			continue
		}
		keep = append(keep, t)
		if t.Expires.Sub(now) > ttl/3 {
			create = false
		}
	}
	return keep, drop, create
}

// Live returns the tokens that have not expired at now, in their order.
func Live(tokens []Token, now time.Time) []Token {
	return slices.DeleteFunc(slices.Clone(tokens), func(t Token) bool { return !now.Before(t.Expires) })
}

// Newest returns the token that expires last, or false.
func Newest(tokens []Token, now time.Time) (Token, bool) {
	live := Live(tokens, now)
	if len(live) == 0 {
		return Token{}, false
	}
	return slices.MaxFunc(live, func(a, b Token) int { return a.Expires.Compare(b.Expires) }), true
}

// Names of the RBAC objects Carousel keeps in a managed cluster.
const (
	BindingNodeBootstrapper = "carousel:kubelet-bootstrap"
	BindingNodeClient       = "carousel:node-autoapprove-bootstrap"
	BindingSelfNodeClient   = "carousel:node-autoapprove-certificate-rotation"
	ClusterInfoRole         = "carousel:bootstrap-signer-clusterinfo"
	NodeTrustRole           = "carousel:node-trust-reader"
)

// The node trust ConfigMap, kube-system/carousel-node-trust, holds the trust
// bundles a node's kubelet needs: the cluster CA bundle (its kubeconfigs'
// certificate-authority) and the kubelet CA bundle (its clientCAFile, which
// verifies the API server's kubelet client certificate). Nodes may read it;
// the node agent copies it into the kubelet's files during a rotation.
const (
	NodeTrustConfigMap    = "carousel-node-trust"
	NodeTrustKeyClusterCA = "ca.crt"
	NodeTrustKeyKubeletCA = "kubelet-ca.crt"
)

// RBAC returns the bindings of the TLS-bootstrapping flow: Carousel's
// bootstrappers may create CSRs, nodes may read
// kube-system/carousel-node-trust, and anyone may read
// kube-public/cluster-info.
func RBAC(cluster string) []client.Object {
	return []client.Object{
		clusterRoleBinding(BindingNodeBootstrapper, "system:node-bootstrapper", bootstrappers(cluster)),
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: ClusterInfoRole},
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"},
				ResourceNames: []string{bootstrapapi.ConfigMapClusterInfo},
			}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: ClusterInfoRole},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: ClusterInfoRole},
			Subjects: []rbacv1.Subject{
				{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "system:anonymous"},
				{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:authenticated"},
			},
		},
		// list and watch with resourceNames need a fieldSelector
		// metadata.name=carousel-node-trust, which is how a node reads it.
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: NodeTrustRole},
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"},
				ResourceNames: []string{NodeTrustConfigMap},
			}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: NodeTrustRole},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: NodeTrustRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}},
		},
	}
}

// AutoApproveBindings are the bindings kube-controller-manager's
// csrapproving controller checks before it approves a kubelet's client
// CSR: Carousel's bootstrappers may ask for node client certificates
// (nodeclient), nodes may renew their own (selfnodeclient). Carousel's
// approver needs neither. They are there only while the Cluster approves
// client CSRs automatically: where that controller runs, they would have it
// approve what csrApproval.client Manual leaves to an administrator.
func AutoApproveBindings(cluster string) []client.Object {
	return []client.Object{
		clusterRoleBinding(BindingNodeClient, "system:certificates.k8s.io:certificatesigningrequests:nodeclient", bootstrappers(cluster)),
		clusterRoleBinding(BindingSelfNodeClient, "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
			[]rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}}),
	}
}

// bootstrappers is the group of the Cluster's bootstrap tokens.
func bootstrappers(cluster string) []rbacv1.Subject {
	return []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: Group(cluster)}}
}

func clusterRoleBinding(name, role string, subjects []rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}
}

// ClusterInfo is kube-public/cluster-info: a kubeconfig with the API server's
// address and the cluster's current trust bundle, and no credentials; and,
// for each of tokens, the key jws-kubeconfig-<id> with the detached JWS
// signature of that kubeconfig made with the token, which is how a client
// that holds a token (kubeadm's token discovery) trusts what it read
// anonymously. Pass the live tokens: a token left out loses its signature,
// and a new bundle changes every signature.
func ClusterInfo(server string, caBundle []byte, tokens []Token) (*corev1.ConfigMap, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[""] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caBundle}
	kubeconfig, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, err
	}
	data := map[string]string{bootstrapapi.KubeConfigKey: string(kubeconfig)}
	for _, t := range tokens {
		sig, err := jws.ComputeDetachedSignature(string(kubeconfig), t.ID, t.Secret)
		if err != nil {
			return nil, fmt.Errorf("signing cluster-info with bootstrap token %s: %w", t.ID, err)
		}
		data[bootstrapapi.JWSSignatureKeyPrefix+t.ID] = sig
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo},
		Data:       data,
	}, nil
}

// NodeTrust is kube-system/carousel-node-trust: the cluster CA bundle (what
// a node's kubeconfigs trust the API server with) and the kubelet CA bundle
// (the kubelet's clientCAFile), readable by system:nodes (see RBAC).
func NodeTrust(clusterBundle, kubeletBundle []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: NodeTrustConfigMap},
		Data: map[string]string{
			NodeTrustKeyClusterCA: string(clusterBundle),
			NodeTrustKeyKubeletCA: string(kubeletBundle),
		},
	}
}

// Kubeconfig is the bootstrap kubeconfig a node starts with: the API server,
// the trust bundle, and the token.
func Kubeconfig(server string, caBundle []byte, t Token) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["default"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caBundle}
	cfg.AuthInfos["kubelet-bootstrap"] = &clientcmdapi.AuthInfo{Token: t.String()}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "default", AuthInfo: "kubelet-bootstrap"}
	cfg.CurrentContext = "default"
	return clientcmd.Write(*cfg)
}

// CurrentCluster is the name and the cluster of a kubeconfig's current
// context, or its only cluster when it has no current context: the API
// server a kubelet started with it would reach, and the CA it would trust.
func CurrentCluster(cfg *clientcmdapi.Config) (string, *clientcmdapi.Cluster, error) {
	if cfg.CurrentContext == "" {
		if len(cfg.Clusters) != 1 {
			return "", nil, fmt.Errorf("no current-context, and %d clusters to choose from", len(cfg.Clusters))
		}
		for name, c := range cfg.Clusters {
			return name, c, nil
		}
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil {
		return "", nil, fmt.Errorf("current-context %q does not exist", cfg.CurrentContext)
	}
	c := cfg.Clusters[ctx.Cluster]
	if c == nil {
		return "", nil, fmt.Errorf("cluster %q of context %q does not exist", ctx.Cluster, cfg.CurrentContext)
	}
	return ctx.Cluster, c, nil
}
