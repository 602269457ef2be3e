package kubeadm_test

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	kubeadmapi "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm"
	"k8s.io/kubernetes/cmd/kubeadm/app/discovery/token"
	"k8s.io/kubernetes/cmd/kubeadm/app/util/pubkeypin"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/test/framework"
)

const cluster = "kubeadm-join"

// discoveryTimeout bounds one kubeadm discovery. kubeadm polls every 5s (or
// the timeout, when shorter) until cluster-info carries a signature for the
// token's ID, then validates once.
const discoveryTimeout = 10 * time.Second

func TestKubeadmTokenDiscovery(t *testing.T) {
	ctx := t.Context()
	env := &envtest.Environment{}
	// kubeadm's discovery reads cluster-info anonymously (anonymous-auth
	// is the API server's default; Carousel's RBAC lets system:anonymous get
	// it); the token then authenticates for the TLS bootstrap.
	env.ControlPlane.GetAPIServer().Configure().
		Set("anonymous-auth", "true").
		Set("enable-bootstrap-token-auth", "true")
	if err := framework.DieWithTestProcess(env, os.Getenv("KUBEBUILDER_ASSETS"), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	// Stopped also after a start that failed half-way: what it started ends.
	t.Cleanup(func() { _ = env.Stop() })
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting the API server (KUBEBUILDER_ASSETS=%q): %v", os.Getenv("KUBEBUILDER_ASSETS"), err)
	}
	admin, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	host, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := host.Host // kubeadm's discovery takes host:port
	ca := firstCert(t, cfg.CAData)

	// What Carousel writes into a managed cluster, from the builders its
	// kubelet bootstrap controller uses.
	tok, err := bootstrap.NewToken(time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	create := func(obj client.Object) {
		t.Helper()
		// kube-public appears a moment after the API server starts.
		var err error
		if wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			err = admin.Create(ctx, obj)
			return !apierrors.IsNotFound(err), nil
		}) != nil || err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
	for _, obj := range bootstrap.RBAC(cluster) {
		create(obj)
	}
	create(bootstrap.TokenSecret(cluster, tok))
	info, err := bootstrap.ClusterInfo(cfg.Host, cfg.CAData, []bootstrap.Token{tok})
	if err != nil {
		t.Fatal(err)
	}
	create(info)

	// The pin as the docs tell a user to compute it, and as kubeadm does.
	pin := "sha256:" + hex.EncodeToString(sha256Sum(ca.RawSubjectPublicKeyInfo))
	if kubeadmPin := pubkeypin.Hash(ca); kubeadmPin != pin {
		t.Fatalf("pin %s; kubeadm computes %s", pin, kubeadmPin)
	}
	discover := func(tokenString, pin string, timeout time.Duration) (*rest.Config, error) {
		d := &kubeadmapi.Discovery{BootstrapToken: &kubeadmapi.BootstrapTokenDiscovery{
			Token: tokenString, APIServerEndpoint: endpoint, CACertHashes: []string{pin},
		}}
		kc, err := token.RetrieveValidatedConfigInfo(nil, d, timeout)
		if err != nil {
			return nil, err
		}
		if len(kc.Clusters) != 1 {
			t.Fatalf("kubeadm returned %d clusters", len(kc.Clusters))
		}
		for _, c := range kc.Clusters {
			if c.Server != cfg.Host {
				t.Errorf("kubeadm returned server %q; want %q", c.Server, cfg.Host)
			}
			got := firstCert(t, c.CertificateAuthorityData)
			if !got.Equal(ca) {
				t.Errorf("kubeadm returned CA %s; want %s", got.Subject, ca.Subject)
			}
		}
		return clientcmd.NewDefaultClientConfig(*kc, &clientcmd.ConfigOverrides{}).ClientConfig()
	}

	t.Run("accepts the token and the CA pin", func(t *testing.T) {
		joined, err := discover(tok.String(), pin, discoveryTimeout)
		if err != nil {
			t.Fatalf("kubeadm token discovery: %v", err)
		}
		// What kubeadm join does next: the TLS bootstrap with the token.
		joined.BearerToken = tok.String()
		cs := kubernetes.NewForConfigOrDie(joined)
		review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("authenticating with the token over the discovered trust: %v", err)
		}
		user := review.Status.UserInfo
		if user.Username != "system:bootstrap:"+tok.ID || !contains(user.Groups, bootstrap.Group(cluster)) {
			t.Errorf("the token authenticates as %s %v", user.Username, user.Groups)
		}
		access, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Verb: "create"}},
		}, metav1.CreateOptions{})
		if err != nil || !access.Status.Allowed {
			t.Errorf("the token may not create a CSR: %v %+v", err, access)
		}
	})

	t.Run("refuses a wrong CA pin", func(t *testing.T) {
		other := "sha256:" + strings.Repeat("0", 64)
		if _, err := discover(tok.String(), other, discoveryTimeout); err == nil || !strings.Contains(err.Error(), "cluster CA found in cluster-info ConfigMap is invalid") {
			t.Fatalf("kubeadm token discovery with a wrong pin: %v", err)
		}
	})

	t.Run("refuses a wrong token secret", func(t *testing.T) {
		wrong := bootstrap.Token{ID: tok.ID, Secret: strings.Repeat("0", 16)}
		if _, err := discover(wrong.String(), pin, discoveryTimeout); err == nil || !strings.Contains(err.Error(), "failed to verify JWS signature") {
			t.Fatalf("kubeadm token discovery with a wrong secret: %v", err)
		}
	})

	t.Run("refuses a token whose signature was removed", func(t *testing.T) {
		// What the controller writes once the token is deleted or expired.
		unsigned, err := bootstrap.ClusterInfo(cfg.Host, cfg.CAData, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(unsigned), info); err != nil {
			t.Fatal(err)
		}
		info.Data = unsigned.Data
		if err := admin.Update(ctx, info); err != nil {
			t.Fatal(err)
		}
		if _, err := discover(tok.String(), pin, 2*time.Second); err == nil || !strings.Contains(err.Error(), "could not find a JWS signature") {
			t.Fatalf("kubeadm token discovery without a signature: %v", err)
		}
	})
}

func firstCert(t *testing.T, pemData []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(pemData)
	if block == nil {
		t.Fatal("no PEM block in the CA data")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func sha256Sum(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
