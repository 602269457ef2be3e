package credentials

import (
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"slices"

	"k8s.io/client-go/util/keyutil"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// DataKeyServiceAccountNextKey holds, in the first step of a service-account
// key rotation, the new signing key: its public key already verifies tokens,
// but the API servers still sign with sa.key.
const DataKeyServiceAccountNextKey = "sa-next.key"

// ServiceAccountKeyStage is how far a service-account key Secret is in a
// rotation. The stages follow each other in this order, and back to Single.
type ServiceAccountKeyStage string

const (
	// ServiceAccountKeySingle means that one key signs tokens and verifies them.
	ServiceAccountKeySingle ServiceAccountKeyStage = "Single"
	// ServiceAccountKeyStaged means that a next key verifies tokens next to the signing
	// key, which still signs. An API server that rolled onto this accepts
	// the tokens of one that signs with the next key already.
	ServiceAccountKeyStaged ServiceAccountKeyStage = "Staged"
	// ServiceAccountKeySwitched means that the new key signs and the previous one still
	// verifies the tokens it signed.
	ServiceAccountKeySwitched ServiceAccountKeyStage = "Switched"
)

// ServiceAccountKey is what a service-account key Secret holds: the key the
// API servers (and kube-controller-manager) sign tokens with, the public keys
// the API servers verify tokens with, and, when Staged, the next signing key.
type ServiceAccountKey struct {
	Signing   crypto.Signer
	Verifying []crypto.PublicKey
	Next      crypto.Signer
}

// NewServiceAccountKey generates a key that signs and verifies alone.
func NewServiceAccountKey(alg pki.KeyAlgorithm) (*ServiceAccountKey, error) {
	key, err := pki.GenerateKey(alg)
	if err != nil {
		return nil, err
	}
	return &ServiceAccountKey{Signing: key, Verifying: []crypto.PublicKey{key.Public()}}, nil
}

// ParseServiceAccountKey reads a service-account key Secret's data. It
// refuses a Secret whose verification keys leave out the signing or the next
// key: an API server would reject the tokens it signs. Errors never quote
// key material.
func ParseServiceAccountKey(data map[string][]byte) (*ServiceAccountKey, error) {
	signing, err := pki.ParsePrivateKey(data[DataKeyServiceAccountKey])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DataKeyServiceAccountKey, err)
	}
	pubs, err := keyutil.ParsePublicKeysPEM(data[DataKeyServiceAccountPublicKey])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DataKeyServiceAccountPublicKey, err)
	}
	k := &ServiceAccountKey{Signing: signing}
	for _, pub := range pubs {
		k.Verifying = append(k.Verifying, crypto.PublicKey(pub))
	}
	if next, ok := data[DataKeyServiceAccountNextKey]; ok {
		if k.Next, err = pki.ParsePrivateKey(next); err != nil {
			return nil, fmt.Errorf("%s: %w", DataKeyServiceAccountNextKey, err)
		}
	}
	// In a fixed order: the error becomes the Ready condition's message,
	// which must not change from one pass to the next.
	for _, key := range []struct {
		name   string
		signer crypto.Signer
	}{{DataKeyServiceAccountKey, k.Signing}, {DataKeyServiceAccountNextKey, k.Next}} {
		if key.signer != nil && !k.verifies(key.signer.Public()) {
			return nil, fmt.Errorf("%s does not hold the public key of %s", DataKeyServiceAccountPublicKey, key.name)
		}
	}
	if k.Next == nil && len(k.Verifying) > 2 {
		return nil, fmt.Errorf("%s holds %d public keys; at most two (the signing key's and the previous one) are kept", DataKeyServiceAccountPublicKey, len(k.Verifying))
	}
	return k, nil
}

func (k *ServiceAccountKey) verifies(pub crypto.PublicKey) bool {
	return slices.ContainsFunc(k.Verifying, func(v crypto.PublicKey) bool { return pki.PublicKeysEqual(v, pub) })
}

// Stage is how far the key is in a rotation.
func (k *ServiceAccountKey) Stage() ServiceAccountKeyStage {
	switch {
	case k.Next != nil:
		return ServiceAccountKeyStaged
	case len(k.Verifying) > 1:
		return ServiceAccountKeySwitched
	}
	return ServiceAccountKeySingle
}

// Staged returns the key with next verifying tokens next to the signing key,
// which keeps signing. It does not modify k.
func (k *ServiceAccountKey) Staged(next crypto.Signer) *ServiceAccountKey {
	return &ServiceAccountKey{Signing: k.Signing, Verifying: []crypto.PublicKey{k.Signing.Public(), next.Public()}, Next: next}
}

// Switched returns the key with the next key signing and both verifying. It
// does not modify k, which must be Staged.
func (k *ServiceAccountKey) Switched() *ServiceAccountKey {
	return &ServiceAccountKey{Signing: k.Next, Verifying: slices.Clone(k.Verifying)}
}

// PreviousDropped returns the key with the signing key verifying alone. It
// does not modify k.
func (k *ServiceAccountKey) PreviousDropped() *ServiceAccountKey {
	return &ServiceAccountKey{Signing: k.Signing, Verifying: []crypto.PublicKey{k.Signing.Public()}}
}

// Data is the Secret data of the key: sa.key, sa.pub with one PEM block per
// verification key, and sa-next.key when Staged.
func (k *ServiceAccountKey) Data() (map[string][]byte, error) {
	signing, err := pki.EncodePrivateKey(k.Signing)
	if err != nil {
		return nil, err
	}
	var pubs []byte
	for _, pub := range k.Verifying {
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			return nil, fmt.Errorf("encoding a service-account public key: %w", err)
		}
		pubs = append(pubs, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...)
	}
	data := map[string][]byte{DataKeyServiceAccountKey: signing, DataKeyServiceAccountPublicKey: pubs}
	if k.Next != nil {
		if data[DataKeyServiceAccountNextKey], err = pki.EncodePrivateKey(k.Next); err != nil {
			return nil, err
		}
	}
	return data, nil
}

// ServiceAccountKeyID is the key ID kube-apiserver writes in the header of
// the tokens a key signs: the unpadded base64url of the SHA-256 of the
// public key's PKIX form.
func ServiceAccountKeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}
