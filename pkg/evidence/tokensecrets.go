package evidence

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/carousel-dev/carousel/pkg/bounded"
	"github.com/carousel-dev/carousel/pkg/clip"
	"github.com/carousel-dev/carousel/pkg/refused"
)

// TokenSecretsBehind moves the kubernetes.io/service-account-token Secrets
// of the managed cluster at endpoint to the signing key keyID: it removes
// the token of each whose token another key signed, and
// kube-controller-manager's token controller, which fills an empty one,
// writes a new token signed with the key it signs with. It returns, sorted
// as namespace/name, the Secrets whose token keyID has not signed yet
// (those it emptied among them). It reads and writes as the client key pair,
// verifying the API server with serverTrust; a Secret changed meanwhile, or
// past the first maxTokenRemovals it empties, is left for the next call.
func (c Checker) TokenSecretsBehind(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM []byte, keyID string) ([]string, error) {
	cs, err := c.clientset(endpoint, serverTrust, certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return tokenSecretsBehind(ctx, cs, keyID)
}

// tokenSecretsBehind is TokenSecretsBehind on cs. A Secret whose update the
// API server refuses (refused.Is) is named with the answer, and the others
// go on; after an update it failed to serve, it removes no more, and fails.
func tokenSecretsBehind(ctx context.Context, cs kubernetes.Interface, keyID string) ([]string, error) {
	var behind []string
	var removeErr error
	removals := 0
	err := bounded.EachItem(ctx, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		opts.FieldSelector = fields.OneTermEqualSelector("type", string(corev1.SecretTypeServiceAccountToken)).String()
		return cs.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, opts)
	}, func(s *corev1.Secret) {
		token := s.Data[corev1.ServiceAccountTokenKey]
		if len(token) > 0 && TokenKeyID(token) == keyID {
			return
		}
		name := s.Namespace + "/" + s.Name
		if len(token) > 0 && removeErr == nil && removals < maxTokenRemovals {
			removals++
			if err := removeToken(ctx, cs, s); refused.Is(err) {
				// The API server answered: the Secret waits for whoever
				// refuses it, named with the answer.
				name += " (update refused: " + clip.Bytes(refused.Message(err), 200) + ")"
			} else {
				removeErr = err
			}
		}
		behind = append(behind, name) // also one without a token, which the token controller has yet to fill
	})
	if err = cmp.Or(err, removeErr); err != nil {
		return nil, fmt.Errorf("re-issuing service-account token Secrets: %w", err)
	}
	slices.Sort(behind)
	return behind, nil
}

// maxTokenRemovals bounds the updates of one call, which a client of the
// default rate (5 a second) makes in 20 s: a cluster with more Secrets to
// re-issue has them removed over several calls.
const maxTokenRemovals = 100

// removeToken removes a Secret's token, unless the Secret changed since it
// was read (the token controller may have re-issued it): the update carries
// the resourceVersion read.
func removeToken(ctx context.Context, cs kubernetes.Interface, s *corev1.Secret) error {
	emptied := s.DeepCopy()
	delete(emptied.Data, corev1.ServiceAccountTokenKey)
	_, err := cs.CoreV1().Secrets(s.Namespace).Update(ctx, emptied, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// TokenKeyID is the key ID (kid) in the header of a JSON Web Token; empty
// when it has none or is no JWT.
func TokenKeyID(token []byte) string {
	header, _, _ := strings.Cut(string(token), ".")
	raw, err := base64.RawURLEncoding.DecodeString(header)
	if err != nil {
		return ""
	}
	var h struct {
		KeyID string `json:"kid"`
	}
	if json.Unmarshal(raw, &h) != nil {
		return ""
	}
	return h.KeyID
}
