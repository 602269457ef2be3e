package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procStat is what /proc/<pid>/stat says of a process.
type procStat struct {
	pid, ppid int
	comm      string        // the command name
	cpu       time.Duration // user and system CPU time used so far
}

// readProcStat reads /proc/<pid>/stat.
func readProcStat(pid int) (procStat, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name is in parentheses and may hold anything; the fields
	// after it start with the state (the 3rd field of the line): the parent
	// is the 4th, utime and stime the 14th and 15th, in clock ticks (100/s).
	open, closing := strings.IndexByte(string(stat), '('), strings.LastIndexByte(string(stat), ')')
	if open < 0 || closing < open {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(stat[closing+1:]))
	if len(fields) < 13 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(fields))
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return procStat{}, err
	}
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	if err != nil {
		return procStat{}, err
	}
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	if err != nil {
		return procStat{}, err
	}
	return procStat{pid: pid, ppid: ppid, comm: string(stat[open+1 : closing]), cpu: time.Duration(utime+stime) * 10 * time.Millisecond}, nil
}

// children are the processes this one started that still run.
func children(b *testing.B) []procStat {
	b.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	check(b, err)
	var found []procStat
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		check(b, err)
		s, err := readProcStat(pid)
		if err == nil && s.ppid == os.Getpid() { // an error: it ended
			found = append(found, s)
		}
	}
	return found
}

// cpuUse is the CPU time used so far by this process (what the benchmark
// runs in it) and by its children, summed by command name; the name of a
// child whose command line holds managedDir (the managed control plane's
// directory), when it is not empty, says "managed".
func cpuUse(b *testing.B, managedDir string) map[string]time.Duration {
	b.Helper()
	self, err := readProcStat(os.Getpid())
	check(b, err)
	use := map[string]time.Duration{"this process": self.cpu}
	for _, s := range children(b) {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.pid))
		if err != nil {
			continue // it ended
		}
		name := s.comm
		if managedDir != "" && strings.Contains(string(cmdline), managedDir) {
			name += " (managed)"
		}
		use[name] += s.cpu
	}
	return use
}

// machineCPU is how many CPUs the machine has, and the time they have all
// been busy (any state but idle and waiting for I/O; time a hypervisor gave
// to others counts as busy: this machine could not use it) and in all, so
// far, in clock ticks, from /proc/stat (see proc(5)).
func machineCPU() (cpus int, busy, total int64, err error) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0, err
	}
	lines := strings.Split(string(stat), "\n")
	fields := strings.Fields(lines[0])
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0, 0, fmt.Errorf("/proc/stat: first line %q", lines[0])
	}
	for _, line := range lines[1:] {
		if strings.HasPrefix(line, "cpu") {
			cpus++
		}
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice,
	// already counted in user and nice].
	for i, f := range fields[1:min(len(fields), 9)] {
		ticks, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		total += ticks
		if i != 3 && i != 4 {
			busy += ticks
		}
	}
	return cpus, busy, total, nil
}
