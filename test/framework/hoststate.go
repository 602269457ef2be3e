package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// HostState is what a kubelet would change on the host if its sandbox failed:
// the sysctls it sets, the host's mounts, its network namespaces and
// interfaces, and the paths it creates. Take one before starting nodes and
// compare it with one taken after they stopped (or their parent was killed).
type HostState struct {
	Sysctls map[string]string
	// Mounts are the mount points of the test process's mount namespace.
	Mounts []string
	// NetworkNamespaces are the network namespaces any process is in.
	NetworkNamespaces []string
	// Links are the network interfaces of the test's namespace.
	Links []string
	// Paths are the kubelet's hard-coded paths that exist.
	Paths []string
}

// kubeletHostPaths are paths a kubelet creates when nothing stops it.
var kubeletHostPaths = []string{"/var/lib/kubelet", "/var/lib/fake-cri", "/var/log/pods", "/var/log/containers", "/run/netns"}

// ReadHostState reads the host's state.
func ReadHostState() (HostState, error) {
	s := HostState{Sysctls: map[string]string{}}
	for _, name := range kubeletSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", name))
		if err != nil {
			return s, err
		}
		s.Sysctls[name] = strings.TrimSpace(string(v))
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(mountinfo)), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			s.Mounts = append(s.Mounts, f[4])
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	seen := map[string]bool{}
	for _, p := range procs {
		if ns, err := os.Readlink(p); err == nil && !seen[ns] {
			seen[ns] = true
			s.NetworkNamespaces = append(s.NetworkNamespaces, ns)
		}
	}
	links, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return s, err
	}
	for _, l := range links {
		s.Links = append(s.Links, l.Name())
	}
	for _, p := range kubeletHostPaths {
		if _, err := os.Lstat(p); err == nil {
			s.Paths = append(s.Paths, p)
		}
	}
	slices.Sort(s.Mounts)
	slices.Sort(s.NetworkNamespaces)
	return s, nil
}

// Diff describes how s differs from before, or returns "" when it does not.
func (s HostState) Diff(before HostState) string {
	var out []string
	for name, v := range before.Sysctls {
		if s.Sysctls[name] != v {
			out = append(out, fmt.Sprintf("sysctl %s is %q, was %q", name, s.Sysctls[name], v))
		}
	}
	for _, d := range []struct {
		what        string
		now, before []string
	}{
		{"mount", s.Mounts, before.Mounts},
		{"network namespace", s.NetworkNamespaces, before.NetworkNamespaces},
		{"network interface", s.Links, before.Links},
		{"path", s.Paths, before.Paths},
	} {
		for _, x := range d.now {
			if !slices.Contains(d.before, x) {
				out = append(out, fmt.Sprintf("new %s %s", d.what, x))
			}
		}
		for _, x := range d.before {
			if !slices.Contains(d.now, x) {
				out = append(out, fmt.Sprintf("%s %s is gone", d.what, x))
			}
		}
	}
	return strings.Join(out, "; ")
}
