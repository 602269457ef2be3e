package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// platform is a GOOS/GOARCH pair.
type platform struct{ OS, Arch string }

func (p platform) String() string { return p.OS + "/" + p.Arch }

// component is a binary that a release ships, and for which platforms.
type component struct {
	Binary    string // the command's name, cmd/<Binary>
	Platforms []platform
	// Scripts are sh scripts of the repository (paths from its root) that
	// every archive but Windows' carries beside the program.
	Scripts []string
}

// The release's components. The plugin goes wherever kubectl runs; the node
// agent runs beside the kubelet, on Linux nodes only.
var (
	pluginComponent = component{
		Binary: "kubectl-carousel",
		Platforms: []platform{
			{"linux", "amd64"}, {"linux", "arm64"},
			{"darwin", "amd64"}, {"darwin", "arm64"},
			{"windows", "amd64"},
		},
		// kubectl's completion of the plugin's arguments runs it.
		Scripts: []string{"cmd/kubectl-carousel/kubectl_complete-carousel"},
	}
	nodeAgentComponent = component{
		Binary:    "carousel-node-agent",
		Platforms: []platform{{"linux", "amd64"}, {"linux", "arm64"}},
	}
	components = []component{pluginComponent, nodeAgentComponent}
)

// Names of what a release writes beside the archives.
const (
	sumsFile     = "SHA256SUMS"
	manifestFile = pluginName + ".yaml"
)

// builder builds the command ./cmd/<binary> for p into out.
type builder func(ctx context.Context, binary string, p platform, out string) error

// config is what a release is made of.
type config struct {
	// Version is the release, without a leading v (the VERSION file).
	Version string
	// Root is the repository's root, where the components' scripts are.
	Root string
	// Out is the directory the release is written to. What an earlier
	// release wrote there is removed first; anything else is refused.
	Out string
	// Staging is where the programs are built to, outside Out.
	Staging string
	// License is the license file every archive carries, if not empty.
	License string
	// MTime is the modification time of every archive entry.
	MTime time.Time
	// DownloadBase is the URL the archives are downloaded from, the release's
	// tag and an archive's name appended.
	DownloadBase string
	// Homepage is the plugin's homepage in its krew manifest.
	Homepage string
}

// artifact is one archive of a release.
type artifact struct {
	Component component
	Platform  platform
	Name      string // the archive's file name
	Binary    string // the program's name inside it
	Members   []member
	Built     string // where the program was built to
	SHA256    string
}

var versionPattern = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

func (c config) validate() error {
	if !versionPattern.MatchString(c.Version) {
		return fmt.Errorf("version %q is not MAJOR.MINOR.PATCH[-PRERELEASE]", c.Version)
	}
	if c.Out == "" || c.Staging == "" {
		return errors.New("no output or staging directory")
	}
	if c.MTime.IsZero() {
		return errors.New("no modification time for the archive entries")
	}
	return nil
}

// tag is the git tag, and so the GitHub release, of the version.
func (c config) tag() string { return "v" + c.Version }

// exe is the name of a program on p.
func exe(binary string, p platform) string {
	if p.OS == "windows" {
		return binary + ".exe"
	}
	return binary
}

// archiveName is the name of the archive of binary for p: a zip for Windows,
// where Explorer opens it as it is, a gzipped tar elsewhere.
func archiveName(binary, version string, p platform) string {
	ext := ".tar.gz"
	if p.OS == "windows" {
		ext = ".zip"
	}
	return fmt.Sprintf("%s_%s_%s_%s%s", binary, version, p.OS, p.Arch, ext)
}

// release builds every component for each of its platforms into c.Staging,
// archives each build in c.Out (see clean) with the
// component's scripts (but on Windows) and the license, and writes SHA256SUMS and the plugin's
// krew manifest there. It returns the archives in the order written.
func release(ctx context.Context, c config, build builder) ([]artifact, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if err := clean(c.Out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return nil, err
	}
	var err error
	var artifacts []artifact
	for _, comp := range components {
		for _, p := range comp.Platforms {
			a := artifact{
				Component: comp,
				Platform:  p,
				Name:      archiveName(comp.Binary, c.Version, p),
				Binary:    exe(comp.Binary, p),
			}
			a.Built = filepath.Join(c.Staging, p.OS+"_"+p.Arch, a.Binary)
			if err := build(ctx, comp.Binary, p, a.Built); err != nil {
				return nil, fmt.Errorf("build %s for %s: %w", comp.Binary, p, err)
			}
			a.Members = []member{{Name: a.Binary, Path: a.Built, Executable: true}}
			if p.OS != "windows" {
				for _, script := range comp.Scripts {
					a.Members = append(a.Members, member{Name: filepath.Base(script), Path: filepath.Join(c.Root, script), Executable: true})
				}
			}
			if c.License != "" {
				a.Members = append(a.Members, member{Name: filepath.Base(c.License), Path: c.License})
			}
			path := filepath.Join(c.Out, a.Name)
			if err := writeArchive(path, a.Members, c.MTime); err != nil {
				return nil, err
			}
			if a.SHA256, err = fileSHA256(path); err != nil {
				return nil, err
			}
			artifacts = append(artifacts, a)
		}
	}
	if err := os.WriteFile(filepath.Join(c.Out, sumsFile), []byte(sha256Sums(artifacts)), 0o644); err != nil {
		return nil, err
	}
	manifest, err := krewManifest(c, artifacts)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(c.Out, manifestFile), manifest, 0o644); err != nil {
		return nil, err
	}
	return artifacts, nil
}

// clean removes from dir what a release writes, the archives of any version
// among them, so that SHA256SUMS and the directory agree, and refuses a
// directory that holds anything else: -out names a directory of releases.
func clean(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !isReleaseFile(e.Name()) {
			return fmt.Errorf("%s holds %s, which a release does not write: refusing to write a release there", dir, e.Name())
		}
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func isReleaseFile(name string) bool {
	if name == sumsFile || name == manifestFile {
		return true
	}
	for _, comp := range components {
		if strings.HasPrefix(name, comp.Binary+"_") && (strings.HasSuffix(name, ".tar.gz") || strings.HasSuffix(name, ".zip")) {
			return true
		}
	}
	return false
}

// sha256Sums is the content of SHA256SUMS, in the format `sha256sum -c`
// reads: one line per archive, sorted by name.
func sha256Sums(artifacts []artifact) string {
	lines := make([]string, 0, len(artifacts))
	for _, a := range artifacts {
		lines = append(lines, a.SHA256+"  "+a.Name+"\n")
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i][66:] < lines[j][66:] })
	return strings.Join(lines, "")
}

func fileSHA256(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}
