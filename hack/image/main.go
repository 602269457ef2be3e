// Command image builds the controller manager's image for several platforms without a container engine: one
// OCI image per platform from the static binaries `make image` cross-compiles, an OCI image index over them,
// written as an OCI image layout that `crane push <layout> <reference>` pushes as it is.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	binaries := fs.String("binaries", "", "directory with one <os>-<arch>/carousel-controller-manager per platform")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list")
	version := fs.String("version", "", "the release the image is (VERSION)")
	revision := fs.String("revision", "", "the git revision it is built from")
	source := fs.String("source", "https://github.com/carousel-dev/carousel", "the repository it is built from")
	epoch := fs.Int64("source-date-epoch", -1, "seconds since 1970 every file and the configuration carry (the commit's time)")
	dest := fs.String("out", "", "directory the OCI image layout is written to (replaced)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var missing []string
	for _, f := range []struct{ name, value string }{{"binaries", *binaries}, {"version", *version}, {"revision", *revision}, {"out", *dest}} {
		if f.value == "" {
			missing = append(missing, "--"+f.name)
		}
	}
	if *epoch < 0 {
		missing = append(missing, "--source-date-epoch")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}

	spec := Spec{Version: *version, Revision: *revision, Source: *source, Created: time.Unix(*epoch, 0).UTC()}
	var list []Platform
	for _, platform := range strings.Split(*platforms, ",") {
		goos, arch, ok := strings.Cut(strings.TrimSpace(platform), "/")
		if !ok || goos == "" || arch == "" {
			return fmt.Errorf("platform %q is not os/arch", platform)
		}
		binary, err := os.ReadFile(filepath.Join(*binaries, goos+"-"+arch, filepath.Base(entrypoint)))
		if err != nil {
			return err
		}
		list = append(list, Platform{OS: goos, Architecture: arch, Binary: binary})
	}
	index, err := Index(spec, list)
	if err != nil {
		return err
	}
	if err := writeLayout(*dest, index, spec.Version); err != nil {
		return err
	}
	return describe(out, *dest, index)
}

// writeLayout replaces dir with an OCI image layout whose only entry is the index, named by the version.
func writeLayout(dir string, index v1.ImageIndex, version string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	path, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return path.AppendIndex(index, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": version}))
}

// describe prints the digests and the compressed size of each platform's image (manifest, configuration and
// layer, what a registry stores and a node pulls).
func describe(out io.Writer, dir string, index v1.ImageIndex) error {
	digest, err := index.Digest()
	if err != nil {
		return err
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: OCI image index %s\n", dir, digest)
	for _, desc := range manifest.Manifests {
		img, err := index.Image(desc.Digest)
		if err != nil {
			return err
		}
		size, err := pulledSize(img)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %-12s %s  %.1f MiB\n", desc.Platform.OS+"/"+desc.Platform.Architecture, desc.Digest, float64(size)/(1<<20))
	}
	return nil
}

func pulledSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	size := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	if size == 0 {
		return 0, errors.New("the image is empty")
	}
	return size, nil
}
