package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
)

func TestRestoreOldCA(t *testing.T) {
	const id, earlier = "2026-11-26T10:00:00Z", "2026-05-01T10:00:00Z"
	ca := func(name string) *pki.KeyPair {
		key, err := pki.GenerateKey(pki.ECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		kp, err := pki.NewCA(pki.CATemplate{CommonName: name, Validity: time.Hour}, key, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	oldCA, newCA := ca("old"), ca("new")
	for _, tt := range []struct {
		name        string
		in          credentials.CAs
		id          string
		want        credentials.CAs
		wantSwapped bool
		wantErr     string
	}{
		{"this rotation's new CA: the old one is current again",
			credentials.CAs{Current: newCA, Previous: oldCA, Rotation: id}, id,
			credentials.CAs{Current: oldCA, Previous: newCA, Rotation: id, AbortedRotation: id}, true, ""},
		{"swapped before a crash: never swapped back",
			credentials.CAs{Current: oldCA, Previous: newCA, Rotation: id, AbortedRotation: id}, id,
			credentials.CAs{Current: oldCA, Previous: newCA, Rotation: id, AbortedRotation: id}, false, ""},
		{"the new CA already deleted",
			credentials.CAs{Current: oldCA, Rotation: id, AbortedRotation: id}, id,
			credentials.CAs{Current: oldCA, Rotation: id, AbortedRotation: id}, false, ""},
		{"aborted before this role got a new CA",
			credentials.CAs{Current: oldCA, Rotation: earlier}, id,
			credentials.CAs{Current: oldCA, Rotation: earlier}, false, ""},
		{"a status without the rotation's start: the Secret says which CA is new",
			credentials.CAs{Current: newCA, Previous: oldCA, Rotation: earlier}, "",
			credentials.CAs{Current: oldCA, Previous: newCA, Rotation: earlier, AbortedRotation: earlier}, true, ""},
		{"an earlier abort's record does not count for this rotation",
			credentials.CAs{Current: newCA, Previous: oldCA, Rotation: id, AbortedRotation: earlier}, id,
			credentials.CAs{Current: oldCA, Previous: newCA, Rotation: id, AbortedRotation: id}, true, ""},
		{"two CAs and no rotation annotation: which is new is unknown",
			credentials.CAs{Current: newCA, Previous: oldCA}, id,
			credentials.CAs{Current: newCA, Previous: oldCA}, false, "no carousel.dev/rotation annotation"},
		{"a Secret restored from another rotation's copy is not swapped",
			credentials.CAs{Current: newCA, Previous: oldCA, Rotation: earlier}, id,
			credentials.CAs{Current: newCA, Previous: oldCA, Rotation: earlier}, false, "not from the one aborted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in
			swapped, err := restoreOldCA(&got, tt.id)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("restoreOldCA: err = %v, want %q", err, tt.wantErr)
			}
			if swapped != tt.wantSwapped || got != tt.want {
				t.Fatalf("restoreOldCA = %v, %+v; want %v, %+v", swapped, got, tt.wantSwapped, tt.want)
			}
		})
	}
}
