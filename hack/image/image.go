package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/carousel-dev/carousel/hack/internal/reproducible"
)

// What every platform's image runs, as the Dockerfile's final stage says too (TestDockerfileDescribesTheImage).
const (
	entrypoint = "/carousel-controller-manager"
	// user is distroless's "nonroot", so that a pod's runAsNonRoot check passes without a runAsUser.
	user    = "65532:65532"
	userID  = 65532
	groupID = 65532
)

// Spec says what goes into the image of every platform. Created is the time every file and the configuration
// carry: the commit's time, so that the same sources give the same digests.
type Spec struct {
	Version  string
	Revision string
	Source   string
	Created  time.Time
}

// Labels are the OCI annotations the configuration carries as labels (its creation time is the configuration's
// own "created").
func (s Spec) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    "carousel-controller-manager",
		"org.opencontainers.image.version":  s.Version,
		"org.opencontainers.image.revision": s.Revision,
		"org.opencontainers.image.source":   s.Source,
	}
}

// Platform is one image of the index: a static binary built for OS/Architecture.
type Platform struct {
	OS           string
	Architecture string
	Binary       []byte
}

// Index assembles one image per platform and the OCI image index over them. Nothing in it depends on when or
// where it is built: file times are Spec.Created, owners are numeric, entries are in a fixed order and the
// gzip header carries no time.
func Index(spec Spec, platforms []Platform) (v1.ImageIndex, error) {
	if len(platforms) == 0 {
		return nil, fmt.Errorf("no platform to build")
	}
	index := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		img, err := image(spec, p)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", p.OS, p.Architecture, err)
		}
		index = mutate.AppendManifests(index, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				MediaType: types.OCIManifestSchema1,
				Platform:  &v1.Platform{OS: p.OS, Architecture: p.Architecture},
			},
		})
	}
	return index, nil
}

func image(spec Spec, p Platform) (v1.Image, error) {
	if len(p.Binary) == 0 {
		return nil, fmt.Errorf("the binary is empty")
	}
	content, err := rootFS(spec.Created, p.Binary)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(content)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: spec.Created}, CreatedBy: "hack/image: " + entrypoint + " " + spec.Version, Comment: "make image"},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = p.OS, p.Architecture
	cfg.Created = v1.Time{Time: spec.Created}
	cfg.Config = v1.Config{
		Entrypoint: []string{entrypoint},
		User:       user,
		WorkingDir: "/",
		Labels:     spec.Labels(),
	}
	return mutate.ConfigFile(img, cfg)
}

// rootFS is the image's only layer: the binary, and what distroless's static base gives a Go program that runs as
// nonroot (the user in /etc/passwd and /etc/group, its home, /tmp). The binary talks only to API servers whose
// CAs it is given, so it needs no system trust store; it uses fixed UTC offsets, so no time-zone database.
func rootFS(created time.Time, binary []byte) ([]byte, error) {
	entries := []reproducible.Entry{
		{Name: "etc/", Mode: 0o755, Dir: true},
		{Name: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Name: "home/", Mode: 0o755, Dir: true},
		{Name: "home/nonroot/", Mode: 0o700, UID: userID, GID: groupID, Dir: true},
		{Name: "tmp/", Mode: 0o1777, Dir: true},
		{Name: entrypoint[1:], Mode: 0o755, Data: binary},
	}
	var buf bytes.Buffer
	if err := reproducible.WriteTar(&buf, entries, created); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
