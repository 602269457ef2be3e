package operator

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

func TestSetMemoryLimit(t *testing.T) {
	const containerLimit = 512 << 20
	for _, tt := range []struct {
		name      string
		ratio     float64
		env       map[string]string
		limit     memlimit.Provider
		wantLimit int64
	}{
		{"a share of the container's limit", 0.9, nil, memlimit.Limit(containerLimit), containerLimit * 9 / 10},
		{"all of it", 1, nil, memlimit.Limit(containerLimit), containerLimit},
		{"turned off", 0, nil, memlimit.Limit(containerLimit), math.MaxInt64},
		{"no container limit", 0.9, nil, func() (uint64, error) { return 0, memlimit.ErrNoLimit }, math.MaxInt64},
		{"GOMEMLIMIT set by hand", 0.9, map[string]string{"GOMEMLIMIT": "300MiB"}, memlimit.Limit(containerLimit), math.MaxInt64},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := debug.SetMemoryLimit(math.MaxInt64)
			t.Cleanup(func() { debug.SetMemoryLimit(before) })
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, err := SetMemoryLimit(tt.ratio, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.wantLimit || debug.SetMemoryLimit(-1) != tt.wantLimit {
				t.Errorf("limit = %d (runtime %d), want %d", got, debug.SetMemoryLimit(-1), tt.wantLimit)
			}
		})
	}
}
