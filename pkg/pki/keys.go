package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sync/atomic"
)

// KeyAlgorithm names a key type and size.
type KeyAlgorithm string

// The key algorithms Carousel generates.
const (
	ECDSAP256 KeyAlgorithm = "ECDSA-P256"
	ECDSAP384 KeyAlgorithm = "ECDSA-P384"
	RSA2048   KeyAlgorithm = "RSA-2048"
	RSA3072   KeyAlgorithm = "RSA-3072"
	RSA4096   KeyAlgorithm = "RSA-4096"
)

// KeyAlgorithms lists every supported algorithm, fastest first.
func KeyAlgorithms() []KeyAlgorithm {
	return []KeyAlgorithm{ECDSAP256, ECDSAP384, RSA2048, RSA3072, RSA4096}
}

// PEM block types.
const (
	pemTypeCertificate        = "CERTIFICATE"
	pemTypePrivateKey         = "PRIVATE KEY"
	pemTypeCertificateRequest = "CERTIFICATE REQUEST"
)

// keysGenerated counts the keys GenerateKey returned; see KeysGenerated.
var keysGenerated atomic.Uint64

// KeysGenerated returns how many keys this process has generated, so that a
// caller can prove (and export as a metric) that a no-op generated none.
func KeysGenerated() uint64 { return keysGenerated.Load() }

// GenerateKey returns a new private key of the given algorithm.
func GenerateKey(alg KeyAlgorithm) (crypto.Signer, error) {
	key, err := generateKey(alg)
	if err == nil {
		keysGenerated.Add(1)
	}
	return key, err
}

func generateKey(alg KeyAlgorithm) (crypto.Signer, error) {
	switch alg {
	case ECDSAP256:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case ECDSAP384:
		return ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case RSA2048:
		return rsa.GenerateKey(rand.Reader, 2048)
	case RSA3072:
		return rsa.GenerateKey(rand.Reader, 3072)
	case RSA4096:
		return rsa.GenerateKey(rand.Reader, 4096)
	}
	return nil, fmt.Errorf("unsupported key algorithm %q", alg)
}

// AlgorithmOf returns the algorithm of a public key, or an error for a key
// type or size Carousel does not issue.
func AlgorithmOf(pub crypto.PublicKey) (KeyAlgorithm, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return ECDSAP256, nil
		case elliptic.P384():
			return ECDSAP384, nil
		}
		return "", fmt.Errorf("unsupported ECDSA curve %s", k.Curve.Params().Name)
	case *rsa.PublicKey:
		switch k.N.BitLen() {
		case 2048:
			return RSA2048, nil
		case 3072:
			return RSA3072, nil
		case 4096:
			return RSA4096, nil
		}
		return "", fmt.Errorf("unsupported RSA key size %d", k.N.BitLen())
	}
	return "", fmt.Errorf("unsupported public key type %T", pub)
}

// EncodePrivateKey encodes a key as a PKCS #8 "PRIVATE KEY" PEM block.
func EncodePrivateKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding private key: %w", err)
	}
	return appendPEM(make([]byte, 0, pemSize(pemTypePrivateKey, len(der))), pemTypePrivateKey, der), nil
}

// ParsePrivateKey parses the first private-key PEM block in data: PKCS #8,
// or the older "RSA PRIVATE KEY" and "EC PRIVATE KEY" forms. Errors never
// quote the key material.
func ParsePrivateKey(data []byte) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no private key PEM block found")
		}
		var (
			key any
			err error
		)
		switch block.Type {
		case pemTypePrivateKey:
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("parsing %s block: %w", block.Type, err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%s block holds a %T, which cannot sign", block.Type, key)
		}
		if _, err := AlgorithmOf(signer.Public()); err != nil {
			return nil, err
		}
		return signer, nil
	}
}

// PublicKeysEqual reports whether two public keys are the same key.
func PublicKeysEqual(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}
