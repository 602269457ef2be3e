package operator

import (
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// DefaultMemoryLimitRatio is the share of the container's memory limit that
// the Go runtime keeps its memory under by default, leaving the rest to what
// the runtime does not count (as Prometheus's --auto-gomemlimit.ratio does).
const DefaultMemoryLimitRatio = 0.9

// SetMemoryLimit sets the Go runtime's soft memory limit (GOMEMLIMIT) to
// ratio of the memory limit that limit reports, in the binary the
// container's cgroup limit: the garbage collector then works harder as the
// heap nears the limit, where by default it lets the heap grow to twice what
// is live and the process would be killed. A ratio of 0, a GOMEMLIMIT or
// AUTOMEMLIMIT in the environment, or no limit at all leaves the runtime's
// limit as it is. It returns the limit in force.
func SetMemoryLimit(ratio float64, limit memlimit.Provider) (int64, error) {
	if ratio == 0 {
		return debug.SetMemoryLimit(-1), nil
	}
	return memlimit.Set(memlimit.WithRatio(ratio), memlimit.WithProvider(limit))
}
