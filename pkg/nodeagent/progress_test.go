package nodeagent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
)

func TestProgress(t *testing.T) {
	dir := t.TempDir()
	preparing := noderenewal.Request{Initiated: time.Date(2026, 11, 23, 9, 30, 0, 0, time.UTC), Phase: v1alpha1.RotationPreparing}
	finalizing := noderenewal.Request{Initiated: preparing.Initiated, Phase: v1alpha1.RotationFinalizing}

	p, err := loadProgress(dir, preparing.String())
	if err != nil || *p != (progress{Request: preparing.String()}) {
		t.Fatalf("without a record: %+v, %v", p, err)
	}
	p.Changes.KubeconfigCA, p.ClientRenewed = true, true
	if err := p.save(dir); err != nil {
		t.Fatal(err)
	}
	if again, err := loadProgress(dir, preparing.String()); err != nil || *again != *p {
		t.Fatalf("the record of the same request: %+v, %v; want %+v", again, err, p)
	}
	if other, err := loadProgress(dir, finalizing.String()); err != nil || *other != (progress{Request: finalizing.String()}) {
		t.Fatalf("the record of another request is not taken: %+v, %v", other, err)
	}
	if err := os.WriteFile(filepath.Join(dir, progressFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if corrupt, err := loadProgress(dir, preparing.String()); err != nil || *corrupt != (progress{Request: preparing.String()}) {
		t.Fatalf("a corrupt record is not taken: %+v, %v", corrupt, err)
	}
	for range 2 {
		if err := clearProgress(dir); err != nil {
			t.Fatal(err)
		}
	}
}
