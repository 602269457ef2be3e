package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"sigs.k8s.io/yaml"
)

var testSpec = Spec{Version: "1.2.3", Revision: "0123abcd", Source: "https://example.test/carousel", Created: time.Unix(1700000000, 0).UTC()}

// testPlatforms are linux/amd64 with the given binary and linux/arm64 with "arm64 binary".
func testPlatforms(amd64 string) []Platform {
	return []Platform{
		{OS: "linux", Architecture: "amd64", Binary: []byte(amd64)},
		{OS: "linux", Architecture: "arm64", Binary: []byte("arm64 binary")},
	}
}

func indexDigest(t *testing.T, spec Spec, platforms []Platform) v1.Hash {
	t.Helper()
	index, err := Index(spec, platforms)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := index.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return digest
}

func TestTheSameSourcesGiveTheSameDigest(t *testing.T) {
	want := indexDigest(t, testSpec, testPlatforms("amd64 binary"))
	if got := indexDigest(t, testSpec, testPlatforms("amd64 binary")); got != want {
		t.Fatalf("built twice: %s, then %s", want, got)
	}

	// What a build must not depend on (when it runs, where) cannot reach the digest: Created is the only time.
	changed := map[string]v1.Hash{
		"another binary":   indexDigest(t, testSpec, testPlatforms("amd64 binary, changed")),
		"another version":  indexDigest(t, Spec{Version: "1.2.4", Revision: testSpec.Revision, Source: testSpec.Source, Created: testSpec.Created}, testPlatforms("amd64 binary")),
		"another revision": indexDigest(t, Spec{Version: testSpec.Version, Revision: "4567", Source: testSpec.Source, Created: testSpec.Created}, testPlatforms("amd64 binary")),
		"another commit time": indexDigest(t, Spec{Version: testSpec.Version, Revision: testSpec.Revision, Source: testSpec.Source, Created: testSpec.Created.Add(time.Second)},
			testPlatforms("amd64 binary")),
	}
	for what, digest := range changed {
		if digest == want {
			t.Errorf("%s gives the same digest %s", what, digest)
		}
	}
}

func TestTheLayoutWrittenTwiceIsTheSame(t *testing.T) {
	dirs := []string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")}
	for _, dir := range dirs {
		index, err := Index(testSpec, testPlatforms("amd64 binary"))
		if err != nil {
			t.Fatal(err)
		}
		if err := writeLayout(dir, index, testSpec.Version); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := tree(t, dirs[0]), tree(t, dirs[1]); !reflect.DeepEqual(a, b) {
		t.Fatalf("two layouts of the same sources differ:\n%v\n%v", slices.Sorted(maps.Keys(a)), slices.Sorted(maps.Keys(b)))
	}

	// crane push reads the layout's one entry; it must be the index, named by the version.
	read, err := layout.ImageIndexFromPath(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	top, err := read.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || !top.Manifests[0].MediaType.IsIndex() || top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "1.2.3" {
		t.Fatalf("the layout's entries are %+v, want the one index named 1.2.3", top.Manifests)
	}
	index, err := read.ImageIndex(top.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(index); err != nil {
		t.Fatalf("the written index is not valid: %v", err)
	}
	var out bytes.Buffer
	if err := describe(&out, dirs[0], index); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^  linux/arm64 +sha256:[0-9a-f]{64}  [0-9.]+ MiB$`).MatchString(out.String()) {
		t.Errorf("describe printed\n%s", out.String())
	}
}

// What crane push does with the layout (remote.WriteIndex), to a registry on loopback: the registry holds the
// index under the version's tag, with the same digest, and serves each platform's image.
func TestTheLayoutPushesToARegistry(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "oci")
	built, err := Index(testSpec, testPlatforms("amd64 binary"))
	if err != nil {
		t.Fatal(err)
	}
	if err := writeLayout(dir, built, testSpec.Version); err != nil {
		t.Fatal(err)
	}
	read, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := read.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	index, err := read.ImageIndex(top.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}

	server := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer server.Close()
	ref, err := name.ParseReference(strings.TrimPrefix(server.URL, "http://") + "/carousel-controller-manager:" + testSpec.Version)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, index); err != nil {
		t.Fatal(err)
	}
	pushed, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := built.Digest()
	if got, _ := pushed.Digest(); got != want {
		t.Fatalf("the registry holds %s, the build was %s", got, want)
	}
	arm64, err := remote.Image(ref, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "arm64"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(arm64); err != nil {
		t.Errorf("the pushed linux/arm64 image: %v", err)
	}
}

func TestEachPlatformRunsTheBinaryAsNonroot(t *testing.T) {
	index, err := Index(testSpec, testPlatforms("amd64 binary"))
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) != 2 {
		t.Fatalf("the index has %d images, want 2", len(manifest.Manifests))
	}
	for _, desc := range manifest.Manifests {
		arch := desc.Platform.Architecture
		img, err := index.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS != "linux" || cfg.Architecture != arch || !cfg.Created.Equal(testSpec.Created) {
			t.Errorf("%s: config says %s/%s created %s", arch, cfg.OS, cfg.Architecture, cfg.Created)
		}
		if !reflect.DeepEqual(cfg.Config.Entrypoint, []string{"/carousel-controller-manager"}) || cfg.Config.User != "65532:65532" {
			t.Errorf("%s: entrypoint %q, user %q", arch, cfg.Config.Entrypoint, cfg.Config.User)
		}
		for key, want := range map[string]string{
			"org.opencontainers.image.version":  "1.2.3",
			"org.opencontainers.image.revision": "0123abcd",
			"org.opencontainers.image.source":   "https://example.test/carousel",
		} {
			if got := cfg.Config.Labels[key]; got != want {
				t.Errorf("%s: label %s is %q, want %q", arch, key, got, want)
			}
		}

		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers (%v), want 1", arch, len(layers), err)
		}
		files := untar(t, layers[0])
		want := map[string]string{
			"etc/":                        "dir 755 0:0",
			"etc/group":                   "file 644 0:0",
			"etc/passwd":                  "file 644 0:0",
			"home/":                       "dir 755 0:0",
			"home/nonroot/":               "dir 700 65532:65532",
			"tmp/":                        "dir 1777 0:0",
			"carousel-controller-manager": "file 755 0:0 " + arch + " binary",
		}
		if !reflect.DeepEqual(files, want) {
			t.Errorf("%s: the layer holds\n%v\nwant\n%v", arch, files, want)
		}
	}
}

func TestIndexRefusesNothingToRun(t *testing.T) {
	if _, err := Index(testSpec, nil); err == nil {
		t.Error("no platform: no error")
	}
	if _, err := Index(testSpec, testPlatforms("")); err == nil || !strings.Contains(err.Error(), "linux/amd64") {
		t.Errorf("an empty binary: error %v, want one naming linux/amd64", err)
	}
	err := run([]string{"--binaries", t.TempDir(), "--version", "1.2.3"}, io.Discard)
	if want := "missing --revision, --out, --source-date-epoch"; err == nil || err.Error() != want {
		t.Errorf("flags missing: error %v, want %q", err, want)
	}
}

// The Dockerfile's final stage must describe the image make image builds: entrypoint, user and label keys.
func TestDockerfileDescribesTheImage(t *testing.T) {
	f, err := os.Open("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var entry, usr string
	var labels []string
	var logical string
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			logical += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		logical += line
		instruction, rest, _ := strings.Cut(logical, " ")
		logical = ""
		switch strings.ToUpper(instruction) {
		case "FROM": // only the final stage counts
			entry, usr, labels = "", "", nil
		case "ENTRYPOINT":
			entry = rest
		case "USER":
			usr = rest
		case "LABEL":
			for _, m := range regexp.MustCompile(`([a-z.]+)=`).FindAllStringSubmatch(rest, -1) {
				labels = append(labels, m[1])
			}
		}
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	var entrypointList []string
	if err := json.Unmarshal([]byte(entry), &entrypointList); err != nil || !reflect.DeepEqual(entrypointList, []string{entrypoint}) {
		t.Errorf("the Dockerfile's ENTRYPOINT is %s, the image's [%q]", entry, entrypoint)
	}
	if usr != user {
		t.Errorf("the Dockerfile's USER is %q, the image's %q", usr, user)
	}
	slices.Sort(labels)
	if want := slices.Sorted(maps.Keys(testSpec.Labels())); !reflect.DeepEqual(labels, want) {
		t.Errorf("the Dockerfile's labels are %v, the image's %v", labels, want)
	}
}

// The chart's default image is the release VERSION names, the one make image builds.
func TestTheChartRunsTheImageOfVERSION(t *testing.T) {
	version, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct {
			Tag string `json:"tag"`
		} `json:"image"`
	}
	for file, into := range map[string]any{"../../charts/carousel/Chart.yaml": &chart, "../../charts/carousel/values.yaml": &values} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	if chart.AppVersion != strings.TrimSpace(string(version)) {
		t.Errorf("Chart.yaml's appVersion is %q, VERSION %q", chart.AppVersion, strings.TrimSpace(string(version)))
	}
	if values.Image.Tag != "" {
		t.Errorf("values.yaml sets image.tag %q; empty means appVersion", values.Image.Tag)
	}
}

func untar(t *testing.T, layer v1.Layer) map[string]string {
	t.Helper()
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]string{}
	r := tar.NewReader(rc)
	for {
		h, err := r.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(testSpec.Created) {
			t.Errorf("%s: mtime %s", h.Name, h.ModTime)
		}
		kind := "file"
		if h.Typeflag == tar.TypeDir {
			kind = "dir"
		}
		desc := fmt.Sprintf("%s %o %d:%d", kind, h.Mode, h.Uid, h.Gid)
		if h.Name == "carousel-controller-manager" {
			content, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			desc += " " + string(content)
		}
		files[h.Name] = desc
	}
}

func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		content, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		files[rel] = string(content)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
