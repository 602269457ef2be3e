package sealing

import (
	"bytes"
	"errors"
	"testing"
)

func TestSealOpensOnlyWithItsKeyAndBinding(t *testing.T) {
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte("ca.key material")
	sealed, err := Seal(plain, key, "team-a/prod")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, plain) {
		t.Fatal("the sealed copy contains the plain text")
	}
	if got, err := Open(sealed, key, "team-a/prod"); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	for name, open := range map[string]func() ([]byte, error){
		"another key":     func() ([]byte, error) { return Open(sealed, other, "team-a/prod") },
		"another binding": func() ([]byte, error) { return Open(sealed, key, "team-b/prod") },
		"tampered":        func() ([]byte, error) { t := bytes.Clone(sealed); t[len(t)-1] ^= 1; return Open(t, key, "team-a/prod") },
	} {
		if _, err := open(); !errors.Is(err, ErrNotOpened) {
			t.Errorf("%s: Open = %v, want ErrNotOpened", name, err)
		}
	}
	if _, err := Open(sealed[:5], key, "team-a/prod"); err == nil {
		t.Error("a truncated copy opened")
	}
	again, err := Seal(plain, key, "team-a/prod")
	if err != nil || bytes.Equal(again, sealed) {
		t.Fatal("two seals of the same plain text are equal: the nonce is not fresh")
	}
}

func TestParseKey(t *testing.T) {
	key, _ := NewKey()
	if got, err := ParseKey(EncodeKey(key)); err != nil || !bytes.Equal(got, key) {
		t.Fatalf("ParseKey(EncodeKey) = %x, %v", got, err)
	}
	for _, bad := range []string{"", "zz", EncodeKey(key)[:10], EncodeKey(key) + "00"} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}
