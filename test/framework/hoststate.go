package framework

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	// NetworkNamespaces are the network namespaces of the test process, of
	// its descendants and of orphans (processes whose parent is PID 1, as
	// one left behind by a killed parent becomes): those the test could
	// leave behind, and not those of another suite running beside it.
	NetworkNamespaces []string
	// Links are the network interfaces of the test's namespace.
	Links []string
	// Paths are the kubelet's hard-coded paths that exist, and the caches
	// the tools the tests run keep under $HOME (homeCachePaths).
	Paths []string
	// Modules are those of watchedModules the kernel has (/sys/module): one
	// the framework makes the kernel load on demand (a type of interface it
	// creates) stays loaded. Only those: /sys/module is the whole host's,
	// where anything else may load a module meanwhile.
	Modules []string
}

// watchedModules are the kernel modules of the interfaces the framework
// creates (Netns).
var watchedModules = []string{"ifb"}

// kubeletHostPaths are paths a kubelet creates when nothing stops it (the
// last, its FlexVolume prober's, kube-controller-manager's too).
var kubeletHostPaths = []string{"/var/lib/kubelet", "/var/lib/fake-cri", "/var/log/pods", "/var/log/containers", "/run/netns",
	"/usr/libexec/kubernetes"}

// homeCachePaths are the caches that kubectl and envtest keep under $HOME,
// outside the private /tmp, unless told otherwise (hack/private-tmp.sh
// does).
func homeCachePaths() []string {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil
	}
	return []string{filepath.Join(home, ".kube", "cache"), filepath.Join(home, ".cache", "kubebuilder-envtest")}
}

// ReadHostState reads the host's state.
func ReadHostState() (HostState, error) {
	s := HostState{Sysctls: map[string]string{}}
	for _, name := range kubeletSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // not in this kernel
		}
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
	seen := map[string]bool{}
	for _, pid := range ownOrOrphanedProcesses() {
		if ns, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns/net")); err == nil && !seen[ns] {
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
	for _, m := range watchedModules {
		if _, err := os.Stat(filepath.Join("/sys/module", m)); err == nil {
			s.Modules = append(s.Modules, m)
		}
	}
	for _, p := range append(slices.Clone(kubeletHostPaths), homeCachePaths()...) {
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
		// newOnly: one gone is none of the suite's doing. A network
		// namespace is seen through a process, the suite's own or an
		// orphan; one of another suite's orphans (a parent killed on
		// purpose, its children an instant from their own end) may be
		// in the state before and gone after.
		newOnly bool
	}{
		{"mount", s.Mounts, before.Mounts, false},
		{"network namespace", s.NetworkNamespaces, before.NetworkNamespaces, true},
		{"network interface", s.Links, before.Links, false},
		{"path", s.Paths, before.Paths, false},
		{"kernel module", s.Modules, before.Modules, false},
	} {
		for _, x := range d.now {
			if !slices.Contains(d.before, x) {
				out = append(out, fmt.Sprintf("new %s %s", d.what, x))
			}
		}
		if d.newOnly {
			continue
		}
		for _, x := range d.before {
			if !slices.Contains(d.now, x) {
				out = append(out, fmt.Sprintf("%s %s is gone", d.what, x))
			}
		}
	}
	return strings.Join(out, "; ")
}

// ownOrOrphanedProcesses returns the PIDs of the test process, of its
// descendants and of the processes whose parent is PID 1. Processes that
// exit while it reads are left out.
func ownOrOrphanedProcesses() []int {
	parents := map[int]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		pid, ppid, ok := parentOf(path)
		if ok {
			parents[pid] = ppid
		}
	}
	self := os.Getpid()
	var pids []int
	for pid, ppid := range parents {
		if ppid == 1 {
			pids = append(pids, pid)
			continue
		}
		// Up the ancestry to self, or to the top; a cycle (a PID reused
		// while reading) ends after len(parents) steps.
		for p, steps := pid, 0; p > 1 && steps < len(parents); p, steps = parents[p], steps+1 {
			if p == self {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// parentOf reads a /proc/<pid>/stat file: the PID and its parent's. The
// parent is the second field after the command, which is in parentheses
// and may hold any character.
func parentOf(statPath string) (pid, ppid int, ok bool) {
	data, err := os.ReadFile(statPath)
	if err != nil {
		return 0, 0, false
	}
	stat := string(data)
	end := strings.LastIndexByte(stat, ')')
	open := strings.IndexByte(stat, '(')
	if open < 1 || end < open {
		return 0, 0, false
	}
	fields := strings.Fields(stat[end+1:])
	if len(fields) < 2 {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(stat[:open]))
	ppid, err2 := strconv.Atoi(fields[1])
	return pid, ppid, err1 == nil && err2 == nil
}
