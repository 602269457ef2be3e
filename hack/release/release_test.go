package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

var testMTime = time.Date(2026, time.March, 14, 15, 9, 26, 0, time.UTC)

// writeFile writes a file into dir with the given permissions and
// modification time, and returns its path.
func writeFile(t *testing.T, dir, name, content string, perm os.FileMode, mtime time.Time) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestArchivesAreReproducible: the bytes of an archive depend on its members'
// names, kinds and contents and on the mtime given, not on the files'
// permissions or times on disk, nor on when it is written.
func TestArchivesAreReproducible(t *testing.T) {
	members := func(perm os.FileMode, mtime time.Time) []member {
		dir := t.TempDir()
		return []member{
			{Name: "kubectl-carousel", Path: writeFile(t, dir, "prog", "\x7fELF a program", perm, mtime), Executable: true},
			{Name: "LICENSE", Path: writeFile(t, dir, "LICENSE", "the license\n", perm, mtime)},
		}
	}
	first := members(0o700, time.Unix(1, 0))
	second := members(0o644, time.Now())
	writers := map[string]func(io.Writer, []member, time.Time) error{"tar.gz": writeTarGz, "zip": writeZip}
	before := map[string][]byte{}
	for name, write := range writers {
		var buf bytes.Buffer
		if err := write(&buf, first, testMTime); err != nil {
			t.Fatal(err)
		}
		before[name] = buf.Bytes()
	}
	time.Sleep(1100 * time.Millisecond) // the clock moves on a second
	for name, write := range writers {
		var again, later bytes.Buffer
		if err := write(&again, second, testMTime); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(before[name], again.Bytes()) {
			t.Errorf("%s: the same members gave different archives", name)
		}
		if err := write(&later, second, testMTime.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(before[name], later.Bytes()) {
			t.Errorf("%s: another mtime gave the same archive: the mtime is not in it", name)
		}
	}
}

// entry is what a test reads back of an archive entry.
type entry struct {
	Name    string
	Mode    os.FileMode
	ModTime time.Time
	Content string
}

func readTarGz(t *testing.T, data []byte) []entry {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if gz.Name != "" || gz.Comment != "" || !gz.ModTime.IsZero() || gz.Extra != nil {
		t.Errorf("gzip header has name %q, comment %q, time %v, extra %q; want none", gz.Name, gz.Comment, gz.ModTime, gz.Extra)
	}
	tr := tar.NewReader(gz)
	var entries []entry
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" || hdr.Gname != "" ||
			len(hdr.PAXRecords) != 0 || !hdr.AccessTime.IsZero() || !hdr.ChangeTime.IsZero() {
			t.Errorf("%s: %+v; want a plain file of 0:0, no names, no PAX records, no access or change time", hdr.Name, hdr)
		}
		content, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, entry{hdr.Name, os.FileMode(hdr.Mode), hdr.ModTime.UTC(), string(content)})
	}
	return entries
}

func readZip(t *testing.T, data []byte) []entry {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var entries []entry
	for _, f := range zr.File {
		if f.Method != zip.Deflate || f.Comment != "" {
			t.Errorf("%s: method %d, comment %q; want deflated, no comment", f.Name, f.Method, f.Comment)
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		content, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, entry{f.Name, f.Mode(), f.Modified.UTC(), string(content)})
	}
	return entries
}

func TestArchiveContent(t *testing.T) {
	dir := t.TempDir()
	members := []member{
		{Name: "kubectl-carousel.exe", Path: writeFile(t, dir, "prog", "MZ a program", 0o600, time.Now()), Executable: true},
		{Name: "LICENSE", Path: writeFile(t, dir, "LICENSE", "the license\n", 0o755, time.Now())},
	}
	for _, tc := range []struct {
		name  string
		write func(io.Writer, []member, time.Time) error
		read  func(*testing.T, []byte) []entry
		mtime time.Time
		want  time.Time
	}{
		{"tar.gz", writeTarGz, readTarGz, testMTime.Add(300 * time.Millisecond), testMTime},
		{"tar.gz before 1980", writeTarGz, readTarGz, time.Unix(86400, 0), time.Unix(86400, 0).UTC()},
		// An MS-DOS time has two-second steps; the extended timestamp Go
		// reads Modified from has seconds.
		{"zip", writeZip, readZip, testMTime.In(time.FixedZone("UTC+5", 5*3600)), testMTime},
		{"zip before 1980", writeZip, readZip, time.Unix(86400, 0), zipEpoch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tc.write(&buf, members, tc.mtime); err != nil {
				t.Fatal(err)
			}
			got := tc.read(t, buf.Bytes())
			want := []entry{
				{"kubectl-carousel.exe", 0o755, tc.want, "MZ a program"},
				{"LICENSE", 0o644, tc.want, "the license\n"},
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("entries:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// fakeBuild stands in for go build: the program it writes names itself.
func fakeBuild(_ context.Context, binary string, p platform, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, []byte(fakeProgram(binary, p)), 0o755)
}

func fakeProgram(binary string, p platform) string { return binary + " for " + p.String() + "\n" }

const completionScript = "#!/bin/sh\nexec kubectl-carousel __complete \"$@\"\n"

func testConfig(t *testing.T, license bool) config {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "cmd", "kubectl-carousel"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "cmd", "kubectl-carousel"), "kubectl_complete-carousel", completionScript, 0o644, time.Now())
	c := config{
		Version:      "1.2.3-rc.1",
		Root:         root,
		Out:          filepath.Join(t.TempDir(), "release"),
		Staging:      t.TempDir(),
		MTime:        testMTime,
		DownloadBase: "https://example.com/releases/download",
		Homepage:     "https://example.com/carousel",
	}
	if license {
		c.License = writeFile(t, t.TempDir(), "LICENSE", "the license\n", 0o644, time.Now())
	}
	return c
}

// krewPlugin is what krew reads of a manifest (sigs.k8s.io/krew/pkg/index).
// The test decodes the manifest into it strictly: krew ignores fields it does
// not know, so a misspelt one would go unnoticed there.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
			Bin string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = data
	}
	return files
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// TestRelease: a release is the archives of both components for each of
// their platforms, each holding the program built for it and the license,
// a SHA256SUMS of them and a krew manifest that points at the plugin's with
// their digests; two releases of the same sources are the same bytes.
func TestRelease(t *testing.T) {
	for _, license := range []bool{true, false} {
		t.Run(fmt.Sprintf("license=%v", license), func(t *testing.T) {
			c := testConfig(t, license)
			if err := os.MkdirAll(c.Out, 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, c.Out, "kubectl-carousel_1.2.2_linux_amd64.tar.gz", "an earlier release", 0o644, time.Now())
			artifacts, err := release(context.Background(), c, fakeBuild)
			if err != nil {
				t.Fatal(err)
			}
			files := readDir(t, c.Out)

			wantNames := []string{
				"kubectl-carousel_1.2.3-rc.1_linux_amd64.tar.gz", "kubectl-carousel_1.2.3-rc.1_linux_arm64.tar.gz",
				"kubectl-carousel_1.2.3-rc.1_darwin_amd64.tar.gz", "kubectl-carousel_1.2.3-rc.1_darwin_arm64.tar.gz",
				"kubectl-carousel_1.2.3-rc.1_windows_amd64.zip",
				"carousel-node-agent_1.2.3-rc.1_linux_amd64.tar.gz", "carousel-node-agent_1.2.3-rc.1_linux_arm64.tar.gz",
			}
			if got := archiveNames(artifacts); !reflect.DeepEqual(got, wantNames) {
				t.Errorf("archives %v, want %v", got, wantNames)
			}
			var gotFiles []string
			for name := range files {
				gotFiles = append(gotFiles, name)
			}
			wantFiles := append([]string{sumsFile, manifestFile}, wantNames...)
			sort.Strings(gotFiles)
			sort.Strings(wantFiles)
			if !reflect.DeepEqual(gotFiles, wantFiles) {
				t.Errorf("%s holds %v, want %v", c.Out, gotFiles, wantFiles)
			}

			// Each archive holds the program built for its platform, and the license.
			for _, a := range artifacts {
				var entries []entry
				if strings.HasSuffix(a.Name, ".zip") {
					entries = readZip(t, files[a.Name])
				} else {
					entries = readTarGz(t, files[a.Name])
				}
				want := []entry{{a.Binary, 0o755, testMTime, fakeProgram(a.Component.Binary, a.Platform)}}
				if a.Component.Binary == "kubectl-carousel" && a.Platform.OS != "windows" {
					want = append(want, entry{"kubectl_complete-carousel", 0o755, testMTime, completionScript})
				}
				if license {
					want = append(want, entry{"LICENSE", 0o644, testMTime, "the license\n"})
				}
				if !reflect.DeepEqual(entries, want) {
					t.Errorf("%s holds %+v, want %+v", a.Name, entries, want)
				}
				if a.SHA256 != digest(files[a.Name]) {
					t.Errorf("%s: digest %s, the file's is %s", a.Name, a.SHA256, digest(files[a.Name]))
				}
			}

			// SHA256SUMS: what sha256sum -c reads, by name.
			var wantSums []string
			for _, name := range wantNames {
				wantSums = append(wantSums, digest(files[name])+"  "+name)
			}
			sort.Slice(wantSums, func(i, j int) bool { return wantSums[i][66:] < wantSums[j][66:] })
			if got, want := string(files[sumsFile]), strings.Join(wantSums, "\n")+"\n"; got != want {
				t.Errorf("SHA256SUMS:\n%s\nwant:\n%s", got, want)
			}

			checkManifest(t, c, files, license)

			// Again, from another staging directory, into another directory.
			again := c
			again.Out = filepath.Join(t.TempDir(), "again")
			again.Staging = t.TempDir()
			if _, err := release(context.Background(), again, fakeBuild); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(readDir(t, again.Out), files) {
				t.Error("a second release of the same sources differs from the first")
			}
		})
	}
}

func checkManifest(t *testing.T, c config, files map[string][]byte, license bool) {
	t.Helper()
	var p krewPlugin
	if err := yaml.UnmarshalStrict(files[manifestFile], &p); err != nil {
		t.Fatalf("%s: %v\n%s", manifestFile, err, files[manifestFile])
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "carousel" {
		t.Errorf("apiVersion %q, kind %q, name %q; want a krew v1alpha2 Plugin named carousel", p.APIVersion, p.Kind, p.Metadata.Name)
	}
	if p.Spec.Version != "v1.2.3-rc.1" || p.Spec.Homepage != c.Homepage {
		t.Errorf("version %q, homepage %q", p.Spec.Version, p.Spec.Homepage)
	}
	if p.Spec.ShortDescription != shortDescription || p.Spec.Description != description || p.Spec.Caveats != caveats {
		t.Errorf("texts:\n%q\n%q\n%q", p.Spec.ShortDescription, p.Spec.Description, p.Spec.Caveats)
	}
	if strings.ContainsAny(shortDescription, "\r\n") || len(shortDescription) > 60 {
		t.Errorf("the short description %q is not one short line", shortDescription)
	}
	if len(p.Spec.Platforms) != len(pluginComponent.Platforms) {
		t.Fatalf("%d platforms, want %d", len(p.Spec.Platforms), len(pluginComponent.Platforms))
	}
	for i, pl := range p.Spec.Platforms {
		want := pluginComponent.Platforms[i]
		if !reflect.DeepEqual(pl.Selector.MatchLabels, map[string]string{"os": want.OS, "arch": want.Arch}) {
			t.Errorf("platform %d selects %v, want %s", i, pl.Selector.MatchLabels, want)
		}
		name := archiveName("kubectl-carousel", "1.2.3-rc.1", want)
		if wantURI := "https://example.com/releases/download/v1.2.3-rc.1/" + name; pl.URI != wantURI {
			t.Errorf("platform %s: uri %q, want %q", want, pl.URI, wantURI)
		}
		if pl.SHA256 != digest(files[name]) {
			t.Errorf("platform %s: sha256 %s, %s's is %s", want, pl.SHA256, name, digest(files[name]))
		}
		bin := exe("kubectl-carousel", want)
		if pl.Bin != bin {
			t.Errorf("platform %s: bin %q, want %q", want, pl.Bin, bin)
		}
		var copied []string
		for _, f := range pl.Files {
			if f.To != "." {
				t.Errorf("platform %s: %s goes to %q, want .", want, f.From, f.To)
			}
			copied = append(copied, f.From)
		}
		wantCopied := []string{bin}
		if want.OS != "windows" {
			wantCopied = append(wantCopied, "kubectl_complete-carousel")
		}
		if license {
			wantCopied = append(wantCopied, "LICENSE")
		}
		if !reflect.DeepEqual(copied, wantCopied) {
			t.Errorf("platform %s: files %v, want %v", want, copied, wantCopied)
		}
	}
}

func TestReleaseRefuses(t *testing.T) {
	for _, version := range []string{"", "v1.2.3", "1.2", "1.2.3-", "1.2.3 "} {
		c := testConfig(t, false)
		c.Version = version
		if _, err := release(context.Background(), c, fakeBuild); err == nil {
			t.Errorf("version %q: no error", version)
		}
	}
	c := testConfig(t, false)
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		t.Fatal(err)
	}
	notes := writeFile(t, c.Out, "notes.txt", "mine", 0o644, time.Now())
	if _, err := release(context.Background(), c, fakeBuild); err == nil || !strings.Contains(err.Error(), "notes.txt") {
		t.Errorf("a directory with another file in it gave %v", err)
	}
	if _, err := os.Stat(notes); err != nil {
		t.Errorf("the other file is gone: %v", err)
	}

	c = testConfig(t, false)
	failing := func(_ context.Context, binary string, p platform, _ string) error {
		if binary == "carousel-node-agent" && p.Arch == "arm64" {
			return errors.New("does not compile")
		}
		return nil
	}
	fakeOrFail := func(ctx context.Context, binary string, p platform, out string) error {
		if err := failing(ctx, binary, p, out); err != nil {
			return err
		}
		return fakeBuild(ctx, binary, p, out)
	}
	_, err := release(context.Background(), c, fakeOrFail)
	if err == nil || !strings.Contains(err.Error(), "carousel-node-agent for linux/arm64: does not compile") {
		t.Errorf("a failed build gave %v", err)
	}
}

func TestRunRefuses(t *testing.T) {
	base := []string{"-version", "1.2.3", "-out", t.TempDir(), "-source-date-epoch", "1700000000", "-krew", "krew", "-validate-krew-manifest", "v"}
	t.Setenv("SOURCE_DATE_EPOCH", "")
	for name, args := range map[string][]string{
		"no build command": base,
		"no krew":          append(append([]string{}, base[:6]...), "--", "go", "build"),
		"no mtime":         append(append(append([]string{}, base[:4]...), base[6:]...), "--", "go", "build"),
	} {
		if err := run(args, io.Discard); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestGoBuilder: the build command gets the platform, CGO_ENABLED=0 and each
// architecture's baseline whatever the environment says, then -o and the
// command's package.
func TestGoBuilder(t *testing.T) {
	t.Setenv("GOAMD64", "v3")
	t.Setenv("CGO_ENABLED", "1")
	out := filepath.Join(t.TempDir(), "prog")
	command := []string{"sh", "-c", `echo "$GOOS $GOARCH $CGO_ENABLED $GOAMD64 $*" > "$3"`, "sh"}
	if err := goBuilder(command, io.Discard)(context.Background(), "kubectl-carousel", platform{"windows", "amd64"}, out); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := "windows amd64 0 v1 -buildvcs=false -o " + out + " ./cmd/kubectl-carousel\n"; string(got) != want {
		t.Errorf("the build ran with %q, want %q", got, want)
	}
}

// krewTool finds one of krew's programs that make release builds into bin/,
// or skips the test.
func krewTool(t *testing.T, name string) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "..", "bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no %s (make release builds it): %v", path, err)
	}
	return path
}

// TestKrewChecks runs krew's own checks, as make release does, on a release
// of stand-in programs, then on manifests that krew must refuse: the checks
// make a bad manifest fail the release.
func TestKrewChecks(t *testing.T) {
	krew, validator := krewTool(t, "krew"), krewTool(t, "validate-krew-manifest")
	c := testConfig(t, true)
	artifacts, err := release(context.Background(), c, fakeBuild)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if err := checkWithKrew(context.Background(), c, validator, krew, artifacts, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	for _, want := range []string{"structural validation OK", "no overlapping spec.platform[].selector", "krew installs carousel for windows/amd64"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, log.String())
		}
	}

	manifest := filepath.Join(c.Out, manifestFile)
	good, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		old, new string
		refusal  string
	}{
		// artifacts[2] is darwin/amd64's, [3] darwin/arm64's.
		"another archive's digest": {artifacts[3].SHA256, artifacts[2].SHA256, "krew install for darwin/arm64"},
		"two platforms for linux/amd64": {"os: linux\n        arch: arm64", "os: linux\n        arch: amd64",
			"overlapping"},
		"a program the archive lacks":  {"bin: kubectl-carousel.exe", "bin: kubectl-carousel", "krew install for windows/amd64"},
		"a file the archive lacks":     {"from: kubectl_complete-carousel", "from: kubectl_complete-carousel.sh", "krew install for linux/amd64"},
		"a misspelt short description": {"  shortDescription:", "  shortDesc:", "should have a short description"},
		"a version without v":          {"version: v1.2.3-rc.1", "version: 1.2.3-rc.1", "validate-krew-manifest"},
	} {
		t.Run(name, func(t *testing.T) {
			if !bytes.Contains(good, []byte(tc.old)) {
				t.Fatalf("the manifest has no %q", tc.old)
			}
			bad := bytes.Replace(good, []byte(tc.old), []byte(tc.new), 1)
			if err := os.WriteFile(manifest, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.WriteFile(manifest, good, 0o644) })
			err := checkWithKrew(context.Background(), c, validator, krew, artifacts, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.refusal) {
				t.Fatalf("got %v, want an error with %q", err, tc.refusal)
			}
			t.Logf("refused: %v", err)
		})
	}
}
