// Package version says which Carousel a binary is: the release named in the
// VERSION file and the git revision it was built from, which the Makefile's
// build stamps in (-ldflags -X, see BuildFlags there), with what the Go
// toolchain recorded as the fallback for a plain go build.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by the Makefile's build: -X github.com/carousel-dev/carousel/pkg/version.version=...
var (
	version  string
	revision string
)

// Info identifies a build.
type Info struct {
	// Version is the release (VERSION), or the module version the Go
	// toolchain recorded, or "unknown".
	Version string
	// Revision is the git commit, with "-dirty" when the tree had changes,
	// or "unknown".
	Revision  string
	GoVersion string
	Platform  string
}

// Get returns the running binary's Info.
func Get() Info {
	info := Info{Version: version, Revision: revision, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if build, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && build.Main.Version != "(devel)" {
			info.Version = build.Main.Version
		}
		if info.Revision == "" {
			info.Revision = vcsRevision(build.Settings)
		}
	}
	if info.Version == "" {
		info.Version = "unknown"
	}
	if info.Revision == "" {
		info.Revision = "unknown"
	}
	return info
}

// vcsRevision is the revision go build stamped from git, if it did.
func vcsRevision(settings []debug.BuildSetting) string {
	var revision, dirty string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if revision == "" {
		return ""
	}
	return revision + dirty
}

// String is the one line a --version flag prints after the binary's name.
func (i Info) String() string {
	return fmt.Sprintf("%s (revision %s, %s, %s)", i.Version, i.Revision, i.GoVersion, i.Platform)
}
