package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestGetPrefersTheStampedValues(t *testing.T) {
	defer func(v, r string) { version, revision = v, r }(version, revision)
	version, revision = "1.2.3", "0123abcd"
	got := Get()
	if got.Version != "1.2.3" || got.Revision != "0123abcd" || got.GoVersion != runtime.Version() || got.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("Get() = %+v", got)
	}
	if want := "1.2.3 (revision 0123abcd, " + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")"; got.String() != want {
		t.Errorf("String() = %q, want %q", got.String(), want)
	}
}

func TestGetSaysUnknownWhenNothingWasStamped(t *testing.T) {
	defer func(v, r string) { version, revision = v, r }(version, revision)
	version, revision = "", ""
	got := Get()
	// A test binary carries no VCS stamp and the main module's version is (devel).
	if got.Version != "unknown" || got.Revision != "unknown" {
		t.Fatalf("Get() = %+v", got)
	}
}

func TestVCSRevision(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"clean", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}, "abc"},
		{"dirty", []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "abc"}}, "abc-dirty"},
		{"not stamped", []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := vcsRevision(tc.settings); got != tc.want {
				t.Errorf("vcsRevision = %q, want %q", got, tc.want)
			}
		})
	}
}
