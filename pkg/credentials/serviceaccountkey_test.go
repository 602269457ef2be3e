package credentials

import (
	"crypto"
	"strings"
	"testing"

	"github.com/carousel-dev/carousel/pkg/pki"
)

func TestServiceAccountKeyStagesRoundTrip(t *testing.T) {
	old, err := NewServiceAccountKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	next, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		key        *ServiceAccountKey
		stage      ServiceAccountKeyStage
		signing    crypto.Signer
		verifying  int
		hasNextKey bool
	}{
		{old, ServiceAccountKeySingle, old.Signing, 1, false},
		{old.Staged(next), ServiceAccountKeyStaged, old.Signing, 2, true},
		{old.Staged(next).Switched(), ServiceAccountKeySwitched, next, 2, false},
		{old.Staged(next).Switched().PreviousDropped(), ServiceAccountKeySingle, next, 1, false},
	} {
		data, err := step.key.Data()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := data[DataKeyServiceAccountNextKey]; ok != step.hasNextKey {
			t.Errorf("%s: %s present = %t", step.stage, DataKeyServiceAccountNextKey, ok)
		}
		parsed, err := ParseServiceAccountKey(data)
		if err != nil {
			t.Fatalf("%s: %v", step.stage, err)
		}
		if parsed.Stage() != step.stage || len(parsed.Verifying) != step.verifying ||
			!pki.PublicKeysEqual(parsed.Signing.Public(), step.signing.Public()) {
			t.Errorf("parsed %s: stage %s, %d verifying keys", step.stage, parsed.Stage(), len(parsed.Verifying))
		}
	}
}

func TestParseServiceAccountKeyRefusesASigningKeyThatDoesNotVerify(t *testing.T) {
	a, _ := NewServiceAccountKey(pki.ECDSAP256)
	b, _ := NewServiceAccountKey(pki.ECDSAP256)
	data, _ := a.Data()
	other, _ := b.Data()
	data[DataKeyServiceAccountPublicKey] = other[DataKeyServiceAccountPublicKey]
	_, err := ParseServiceAccountKey(data)
	if err == nil || !strings.Contains(err.Error(), "sa.pub does not hold the public key of sa.key") {
		t.Fatalf("error = %v", err)
	}
	if strings.Contains(err.Error(), "PRIVATE KEY") {
		t.Fatal("the error quotes key material")
	}
}

// A Secret whose sa.pub holds neither the signing key's public key nor the
// next one's gives the same error every time: it becomes the Ready
// condition's message, which must not change from one pass to the next.
func TestParseServiceAccountKeyNamesTheSameKeyEachTime(t *testing.T) {
	a, _ := NewServiceAccountKey(pki.ECDSAP256)
	b, _ := NewServiceAccountKey(pki.ECDSAP256)
	next, _ := pki.GenerateKey(pki.ECDSAP256)
	data, _ := a.Staged(next).Data()
	other, _ := b.Data()
	data[DataKeyServiceAccountPublicKey] = other[DataKeyServiceAccountPublicKey]
	for range 50 {
		if _, err := ParseServiceAccountKey(data); err == nil || err.Error() != "sa.pub does not hold the public key of sa.key" {
			t.Fatalf("error = %v, want the signing key named, every time", err)
		}
	}
}
