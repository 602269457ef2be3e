package bootstrap

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/token/jws"
)

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func TestTokenSecretRoundTrip(t *testing.T) {
	tok, err := NewToken(24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(bootstrapapi.BootstrapTokenPattern).MatchString(tok.String()) {
		t.Fatalf("token %q does not match the bootstrap token format", tok)
	}
	s := TokenSecret("prod", tok)
	if s.Name != "bootstrap-token-"+tok.ID || s.Namespace != "kube-system" || s.Type != bootstrapapi.SecretTypeBootstrapToken {
		t.Fatalf("unexpected secret %s/%s of type %s", s.Namespace, s.Name, s.Type)
	}
	if !regexp.MustCompile(bootstrapapi.BootstrapGroupPattern).MatchString(s.StringData[bootstrapapi.BootstrapTokenExtraGroupsKey]) {
		t.Fatalf("extra group %q is not a valid bootstrap group", s.StringData[bootstrapapi.BootstrapTokenExtraGroupsKey])
	}
	for _, usage := range []string{bootstrapapi.BootstrapTokenUsageAuthentication, bootstrapapi.BootstrapTokenUsageSigningKey} {
		if s.StringData[usage] != "true" {
			t.Fatalf("the token lacks %s", usage)
		}
	}
	stored := &corev1.Secret{ObjectMeta: s.ObjectMeta, Type: s.Type, Data: map[string][]byte{}}
	for k, v := range s.StringData {
		stored.Data[k] = []byte(v)
	}
	got, err := ParseTokenSecret("prod", stored)
	if err != nil || got != tok {
		t.Fatalf("ParseTokenSecret = %+v, %v; want %+v", got, err, tok)
	}

	// What the API server's bootstrap authenticator does not authenticate is
	// no token of Carousel's: a group among the extra ones that is not a
	// valid bootstrap group name (a policy engine added it, say), or a
	// Secret being deleted.
	for name, change := range map[string]func(*corev1.Secret){
		"another group, not a bootstrap one": func(s *corev1.Secret) {
			s.Data[bootstrapapi.BootstrapTokenExtraGroupsKey] = []byte(Group("prod") + ",admins")
		},
		"a bootstrap group with a space": func(s *corev1.Secret) {
			s.Data[bootstrapapi.BootstrapTokenExtraGroupsKey] = []byte(Group("prod") + ", system:bootstrappers:x")
		},
		"being deleted": func(s *corev1.Secret) { s.DeletionTimestamp = &metav1.Time{Time: now} },
	} {
		changed := stored.DeepCopy()
		change(changed)
		if got, err := ParseTokenSecret("prod", changed); err == nil {
			t.Errorf("%s: ParseTokenSecret = %+v, want an error", name, got)
		}
	}
	other := stored.DeepCopy()
	other.Data[bootstrapapi.BootstrapTokenExtraGroupsKey] = []byte("system:bootstrappers:other," + Group("prod"))
	if _, err := ParseTokenSecret("prod", other); err != nil {
		t.Errorf("with another valid bootstrap group too: %v", err)
	}
}

func TestTokenPlan(t *testing.T) {
	ttl := 24 * time.Hour
	tok := func(left time.Duration) Token { return Token{ID: left.String(), Expires: now.Add(left)} }
	tests := []struct {
		name       string
		tokens     []Token
		wantDrop   int
		wantCreate bool
	}{
		{"none", nil, 0, true},
		{"a fresh one", []Token{tok(20 * time.Hour)}, 0, false},
		{"one just made, by a clock a little ahead", []Token{tok(ttl + 30*time.Second)}, 0, false},
		{"one with less than a third left", []Token{tok(7 * time.Hour)}, 0, true},
		{"an expired one and a fresh one", []Token{tok(-time.Minute), tok(23 * time.Hour)}, 1, false},
		{"expiring exactly now", []Token{tok(0)}, 1, true},
		{"one made for a longer TTL than the Cluster's now, or not by Carousel", []Token{tok(7 * 24 * time.Hour), tok(7 * time.Hour)}, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keep, drop, create := TokenPlan(tt.tokens, ttl, now)
			if len(drop) != tt.wantDrop || len(keep)+len(drop) != len(tt.tokens) || create != tt.wantCreate {
				t.Fatalf("TokenPlan = keep %v, drop %v, create %v; want %d dropped, create %v", keep, drop, create, tt.wantDrop, tt.wantCreate)
			}
			for _, k := range keep {
				if !now.Before(k.Expires) || k.Expires.Sub(now) > ttl+time.Minute {
					t.Errorf("kept %v, which expires %s from now", k, k.Expires.Sub(now))
				}
			}
		})
	}
	newest, ok := Newest([]Token{tok(time.Hour), tok(-time.Hour), tok(5 * time.Hour)}, now)
	if !ok || newest.Expires != now.Add(5*time.Hour) {
		t.Fatalf("Newest = %+v, %v", newest, ok)
	}
	if _, ok := Newest([]Token{tok(-time.Hour)}, now); ok {
		t.Fatal("an expired token is nobody's newest")
	}
}

func TestClusterInfoAndKubeconfig(t *testing.T) {
	cm, err := ClusterInfo("https://api:6443", []byte("bundle"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load([]byte(cm.Data[bootstrapapi.KubeConfigKey]))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Clusters[""].Server != "https://api:6443" || string(cfg.Clusters[""].CertificateAuthorityData) != "bundle" || len(cfg.AuthInfos) != 0 {
		t.Fatalf("cluster-info kubeconfig %+v", cfg)
	}
	kc, err := Kubeconfig("https://api:6443", []byte("bundle"), Token{ID: "abcdef", Secret: "0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err = clientcmd.Load(kc)
	if err != nil || cfg.AuthInfos["kubelet-bootstrap"].Token != "abcdef.0123456789abcdef" {
		t.Fatalf("bootstrap kubeconfig %+v, %v", cfg, err)
	}
}

func TestClusterInfoSignatures(t *testing.T) {
	a := Token{ID: "abcdef", Secret: "0123456789abcdef", Expires: now.Add(time.Hour)}
	b := Token{ID: "ghijkl", Secret: "fedcba9876543210", Expires: now.Add(2 * time.Hour)}
	tests := []struct {
		name   string
		bundle string
		tokens []Token
	}{
		{"no tokens: no signatures", "bundle-0", nil},
		{"one token", "bundle-0", []Token{a}},
		{"two tokens", "bundle-0", []Token{a, b}},
		{"two tokens, another bundle", "bundle-0+1", []Token{b, a}},
	}
	signatures := map[string]map[string]string{} // bundle -> key -> signature
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cm, err := ClusterInfo("https://api:6443", []byte(tt.bundle), tt.tokens)
			if err != nil {
				t.Fatal(err)
			}
			kubeconfig := cm.Data[bootstrapapi.KubeConfigKey]
			wantKeys := []string{bootstrapapi.KubeConfigKey}
			for _, tok := range tt.tokens {
				wantKeys = append(wantKeys, bootstrapapi.JWSSignatureKeyPrefix+tok.ID)
			}
			if got := slices.Sorted(maps.Keys(cm.Data)); !slices.Equal(got, slices.Sorted(slices.Values(wantKeys))) {
				t.Fatalf("keys %v; want %v", got, wantKeys)
			}
			for _, tok := range tt.tokens {
				sig := cm.Data[bootstrapapi.JWSSignatureKeyPrefix+tok.ID]
				if !jws.DetachedTokenIsValid(sig, kubeconfig, tok.ID, tok.Secret) {
					t.Errorf("the signature of token %s does not verify", tok.ID)
				}
				if jws.DetachedTokenIsValid(sig, kubeconfig, tok.ID, strings.Repeat("0", 16)) {
					t.Errorf("the signature of token %s verifies with another secret", tok.ID)
				}
				if jws.DetachedTokenIsValid(sig, kubeconfig+" ", tok.ID, tok.Secret) {
					t.Errorf("the signature of token %s verifies other content", tok.ID)
				}
				key := bootstrapapi.JWSSignatureKeyPrefix + tok.ID
				if signatures[tt.bundle] == nil {
					signatures[tt.bundle] = map[string]string{}
				}
				if prev, ok := signatures[tt.bundle][key]; ok && prev != sig {
					t.Errorf("token %s: the same bundle signed differently (%q, %q): a no-op reconcile would write", tok.ID, prev, sig)
				}
				signatures[tt.bundle][key] = sig
			}
		})
	}
	for key, sig := range signatures["bundle-0"] {
		if other, ok := signatures["bundle-0+1"][key]; ok && other == sig {
			t.Errorf("%s did not change with the bundle", key)
		}
	}
}

func TestNodeTrust(t *testing.T) {
	cm := NodeTrust([]byte("cluster-bundle"), []byte("kubelet-bundle"))
	if cm.Namespace != "kube-system" || cm.Name != "carousel-node-trust" {
		t.Fatalf("node trust ConfigMap %s/%s", cm.Namespace, cm.Name)
	}
	want := map[string]string{"ca.crt": "cluster-bundle", "kubelet-ca.crt": "kubelet-bundle"}
	if !maps.Equal(cm.Data, want) {
		t.Fatalf("data %v; want %v", cm.Data, want)
	}
}

func TestRBACLetsNodesReadOnlyTheirTrust(t *testing.T) {
	var role *rbacv1.Role
	var binding *rbacv1.RoleBinding
	for _, obj := range RBAC("prod") {
		if obj.GetName() != NodeTrustRole {
			continue
		}
		switch o := obj.(type) {
		case *rbacv1.Role:
			role = o
		case *rbacv1.RoleBinding:
			binding = o
		}
	}
	if role == nil || binding == nil {
		t.Fatalf("RBAC has no Role and RoleBinding %s", NodeTrustRole)
	}
	if role.Namespace != "kube-system" || binding.Namespace != "kube-system" {
		t.Fatalf("Role in %q, RoleBinding in %q; want kube-system", role.Namespace, binding.Namespace)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
		Verbs: []string{"get", "list", "watch"}, ResourceNames: []string{NodeTrustConfigMap}}}
	if !slices.EqualFunc(role.Rules, want, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
			slices.Equal(a.Verbs, b.Verbs) && slices.Equal(a.ResourceNames, b.ResourceNames) && len(a.NonResourceURLs) == 0
	}) {
		t.Fatalf("rules %+v; want %+v", role.Rules, want)
	}
	if binding.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: NodeTrustRole}) ||
		len(binding.Subjects) != 1 || binding.Subjects[0] != (rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}) {
		t.Fatalf("binding %+v", binding)
	}
}
