// Package sealing encrypts a copy of secret material for a short trip
// through an API server: AES-256-GCM under a fresh random key that is shown
// to a person once and stored nowhere, with the copy bound (as additional
// authenticated data) to what it belongs to, so that it cannot be passed off
// as another's. kubectl carousel's certs upload, download and restore use it.
package sealing

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// KeyBytes is the length of a key: AES-256.
const KeyBytes = 32

// ErrNotOpened means the key does not open the copy, or the copy belongs to
// something else than binding.
var ErrNotOpened = errors.New("the key does not open this copy (wrong key, or another's copy)")

// NewKey returns a fresh random key.
func NewKey() ([]byte, error) {
	key := make([]byte, KeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return key, nil
}

// ParseKey reads a key written as hex (EncodeKey).
func ParseKey(keyHex string) ([]byte, error) {
	key, err := hex.DecodeString(keyHex)
	if err != nil || len(key) != KeyBytes {
		return nil, fmt.Errorf("a key is %d hex characters", 2*KeyBytes)
	}
	return key, nil
}

// EncodeKey writes a key as hex, to be shown once.
func EncodeKey(key []byte) string { return hex.EncodeToString(key) }

// Seal encrypts plain under key, bound to binding, with a fresh nonce in
// front of the ciphertext.
func Seal(plain, key []byte, binding string) ([]byte, error) {
	aead, err := gcm(key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, plain, []byte(binding)), nil
}

// Open decrypts what Seal produced for the same key and binding.
func Open(sealed, key []byte, binding string) ([]byte, error) {
	aead, err := gcm(key)
	if err != nil {
		return nil, err
	}
	if len(sealed) < aead.NonceSize() {
		return nil, errors.New("the sealed copy is truncated")
	}
	plain, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], []byte(binding))
	if err != nil {
		return nil, ErrNotOpened
	}
	return plain, nil
}

func gcm(key []byte) (cipher.AEAD, error) {
	if len(key) != KeyBytes {
		return nil, fmt.Errorf("a key must be %d bytes (%d hex characters)", KeyBytes, 2*KeyBytes)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}
