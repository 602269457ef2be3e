package bootstrap

import (
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
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
	stored := &corev1.Secret{ObjectMeta: s.ObjectMeta, Data: map[string][]byte{}}
	for k, v := range s.StringData {
		stored.Data[k] = []byte(v)
	}
	got, err := ParseTokenSecret(stored)
	if err != nil || got != tok {
		t.Fatalf("ParseTokenSecret = %+v, %v; want %+v", got, err, tok)
	}
}

func TestTokenPlan(t *testing.T) {
	ttl := 24 * time.Hour
	tok := func(left time.Duration) Token { return Token{ID: left.String(), Expires: now.Add(left)} }
	tests := []struct {
		name        string
		tokens      []Token
		wantExpired int
		wantCreate  bool
	}{
		{"none", nil, 0, true},
		{"a fresh one", []Token{tok(20 * time.Hour)}, 0, false},
		{"one with less than a third left", []Token{tok(7 * time.Hour)}, 0, true},
		{"an expired one and a fresh one", []Token{tok(-time.Minute), tok(23 * time.Hour)}, 1, false},
		{"expiring exactly now", []Token{tok(0)}, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expired, create := TokenPlan(tt.tokens, ttl, now)
			if len(expired) != tt.wantExpired || create != tt.wantCreate {
				t.Fatalf("TokenPlan = %d expired, create %v; want %d, %v", len(expired), create, tt.wantExpired, tt.wantCreate)
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
	cm, err := ClusterInfo("https://api:6443", []byte("bundle"))
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
