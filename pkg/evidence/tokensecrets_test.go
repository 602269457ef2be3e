package evidence

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestTokenKeyID(t *testing.T) {
	header := func(json string) string { return base64.RawURLEncoding.EncodeToString([]byte(json)) }
	for _, tc := range []struct{ name, token, want string }{
		{"a JWT", header(`{"alg":"ES256","kid":"abc-_1"}`) + ".e30.sig", "abc-_1"},
		{"no kid", header(`{"alg":"ES256"}`) + ".e30.sig", ""},
		{"not base64url", "%%%.e30.sig", ""},
		{"not JSON", header("kid") + ".e30.sig", ""},
		{"empty", "", ""},
	} {
		if got := TokenKeyID([]byte(tc.token)); got != tc.want {
			t.Errorf("%s: TokenKeyID = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A token the API server fails to remove (an outage) fails the check, which
// then removes no more. One it refuses to remove (an admission webhook, an
// immutable Secret) is named with the answer, and the others are removed:
// neither is reported as a Secret still behind, for ever, with no word of
// why.
func TestATokenThatCannotBeRemovedHoldsTheCheck(t *testing.T) {
	stale := []byte(base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"ES256","kid":"old"}`)) + ".e30.sig")
	tokenSecret := func(ns string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "token"}, Type: corev1.SecretTypeServiceAccountToken,
			Data: map[string][]byte{corev1.ServiceAccountTokenKey: stale}}
	}
	secrets := schema.GroupResource{Resource: "secrets"}
	for _, tt := range []struct {
		name        string
		updateErr   error
		wantErr     string
		wantBehind  []string
		wantUpdates int
	}{
		{"the API server fails to serve it: the check fails", apierrors.NewServiceUnavailable("etcd is down"), "etcd is down", nil, 1},
		{"an admission webhook refuses it: each named, and the API server reachable", apierrors.NewForbidden(secrets, "token",
			errors.New(`admission webhook "deny.example.com" denied the request`)), "",
			[]string{`a/token (update refused: secrets "token" is forbidden: admission webhook "deny.example.com" denied the request)`,
				`b/token (update refused: secrets "token" is forbidden: admission webhook "deny.example.com" denied the request)`}, 2},
		{"an immutable Secret: named", apierrors.NewInvalid(schema.GroupKind{Kind: "Secret"}, "token", nil), "",
			[]string{`a/token (update refused: Secret "token" is invalid)`, `b/token (update refused: Secret "token" is invalid)`}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset(tokenSecret("a"), tokenSecret("b"))
			updates := 0
			cs.PrependReactor("update", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
				updates++
				return true, nil, tt.updateErr
			})
			behind, err := tokenSecretsBehind(context.Background(), cs, "new")
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) || tt.wantErr == "" && err != nil {
				t.Fatalf("tokenSecretsBehind = %v, %v; want the error %q", behind, err, tt.wantErr)
			}
			if !slices.Equal(behind, tt.wantBehind) {
				t.Errorf("behind %q, want %q", behind, tt.wantBehind)
			}
			if updates != tt.wantUpdates {
				t.Errorf("%d updates, want %d: none after one the API server failed to serve", updates, tt.wantUpdates)
			}
		})
	}
}

// One call empties at most maxTokenRemovals Secrets (a client of the default
// rate makes them in 20 s); the others are named behind, for the next call.
func TestACallEmptiesABoundedNumberOfTokenSecrets(t *testing.T) {
	stale := []byte(base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"ES256","kid":"old"}`)) + ".e30.sig")
	var objects []runtime.Object
	for i := range maxTokenRemovals + 5 {
		objects = append(objects, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%03d", i), Name: "token"},
			Type: corev1.SecretTypeServiceAccountToken, Data: map[string][]byte{corev1.ServiceAccountTokenKey: stale}})
	}
	cs := fake.NewClientset(objects...)
	updates := 0
	cs.PrependReactor("update", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		updates++
		return false, nil, nil
	})
	behind, err := tokenSecretsBehind(context.Background(), cs, "new")
	if err != nil || len(behind) != maxTokenRemovals+5 || updates != maxTokenRemovals {
		t.Errorf("tokenSecretsBehind = %d behind, %v after %d updates; want all %d behind after %d", len(behind), err, updates, maxTokenRemovals+5, maxTokenRemovals)
	}
}
