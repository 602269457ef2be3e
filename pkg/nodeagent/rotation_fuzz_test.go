package nodeagent

import (
	"math"
	"testing"
	"time"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// fuzzJitter maps 64 random bits onto [0, 1) as rand.Float64, Run's jitter
// source, does.
func fuzzJitter(bits uint64) float64 { return float64(bits>>11) / (1 << 53) }

// FuzzNextRotation checks NextRotation's contract for any certificate
// lifetime (up to 200 years), renewal time, minimum interval and jitter in
// [0, 1):
//   - the jittered deadline lies between 70% and 90% of the lifetime, so it
//     is never after NotAfter (strictly before it for a positive lifetime);
//   - the rotation is never before that deadline, nor before minInterval
//     after the renewal, unless that floor is capped at half of what the
//     certificate had left (its lifetime less pki.Backdate); it is exactly
//     the later of the deadline and that floor, so the floor postpones a
//     rotation by at most minInterval and half of what was left;
//   - a certificate that arrived with the clocks agreeing (within Backdate of
//     its NotBefore) and outlives its Backdate is renewed before its NotAfter;
//     without a known renewal, the rotation is the deadline;
//   - the result is deterministic for a fixed jitter, and never earlier for a
//     larger jitter, a later renewal or a longer minimum interval.
func FuzzNextRotation(f *testing.F) {
	const (
		hour = int64(time.Hour)
		year = int64(365 * 24 * time.Hour)
	)
	// Arguments: NotBefore (seconds after 2026-01-01), lifetime, renewal
	// after NotBefore (unknown unless renewedKnown), minimum interval (all
	// durations in nanoseconds), two jitters as random bits.
	f.Add(int64(0), 100*hour, int64(5*time.Minute), true, int64(5*time.Minute), uint64(1)<<63, uint64(0))
	f.Add(int64(0), 100*hour, int64(0), false, int64(5*time.Minute), uint64(1)<<63, uint64(math.MaxUint64))
	f.Add(int64(0), 100*hour, 200*hour, true, int64(5*time.Minute), uint64(1)<<63, uint64(1))                         // node clock ahead
	f.Add(int64(0), int64(6*time.Minute), int64(5*time.Minute), true, int64(5*time.Minute), uint64(0), uint64(1)<<62) // short certificate
	f.Add(int64(0), int64(15*time.Minute), hour, true, int64(5*time.Minute), uint64(math.MaxUint64), uint64(0))
	f.Add(int64(0), int64(4*time.Minute), int64(5*time.Minute), true, int64(5*time.Minute), uint64(0), uint64(0)) // nothing left
	f.Add(int64(0), int64(100*time.Minute), int64(90*time.Minute), true, hour, uint64(1)<<63, uint64(1)<<63)
	f.Add(int64(-3600), int64(0), int64(0), true, int64(0), uint64(0), uint64(0))                           // zero lifetime, zero interval
	f.Add(int64(86400), 10*year, int64(pki.Backdate), true, 10*year, uint64(math.MaxUint64), uint64(1)<<63) // a 10-year certificate, interval as long
	f.Add(int64(0), int64(time.Nanosecond), int64(-time.Hour), true, int64(time.Nanosecond), uint64(1), uint64(2))
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, notBeforeSec, life, renewedOff int64, renewedKnown bool, minInterval int64, jitterBits, otherJitterBits uint64) {
		// A domain where no time arithmetic saturates: NotBefore within a
		// century of 2026, lifetimes and intervals up to 200 years, renewals
		// within 200 years of NotBefore.
		span := 200 * year
		notBefore := base.Add(time.Duration(notBeforeSec%(100*year/int64(time.Second))) * time.Second)
		lifetime := time.Duration(abs(life % span))
		notAfter := notBefore.Add(lifetime)
		interval := time.Duration(abs(minInterval % span))
		var renewed time.Time
		if renewedKnown {
			renewed = notBefore.Add(time.Duration(renewedOff % span))
		}
		jitter, otherJitter := fuzzJitter(jitterBits), fuzzJitter(otherJitterBits)

		next := NextRotation(notBefore, notAfter, renewed, interval, jitter)
		if again := NextRotation(notBefore, notAfter, renewed, interval, jitter); !again.Equal(next) {
			t.Fatalf("not deterministic: %s, then %s", next, again)
		}

		deadline := RotationDeadline(notBefore, notAfter, jitter)
		at := float64(deadline.Sub(notBefore))
		if lo, hi := 0.7*float64(lifetime), 0.9*float64(lifetime); at < lo-1e-9*lo-2 || at > hi+1e-9*hi+2 {
			t.Fatalf("deadline %s after NotBefore, outside 70-90%% of %s (jitter %v)", deadline.Sub(notBefore), lifetime, jitter)
		}
		if deadline.After(notAfter) || lifetime > 0 && !deadline.Before(notAfter) || deadline.Before(notBefore) {
			t.Fatalf("deadline %s outside [%s, %s) (jitter %v)", deadline, notBefore, notAfter, jitter)
		}

		left := max(lifetime-pki.Backdate, 0)
		floor := renewed.Add(min(interval, left/2))
		if next.Before(deadline) {
			t.Fatalf("rotation %s before the deadline %s", next, deadline)
		}
		if next.Before(floor) {
			t.Fatalf("rotation %s sooner than min(%s, half of %s) after the renewal at %s", next, interval, left, renewed)
		}
		if !next.Equal(deadline) && !next.Equal(floor) {
			t.Fatalf("rotation %s is neither the deadline %s nor the floor %s", next, deadline, floor)
		}
		if next.After(deadline) && (next.Sub(renewed) > interval || next.Sub(renewed) > left/2) {
			t.Fatalf("postponed to %s, more than %s or half of %s after the renewal at %s", next, interval, left, renewed)
		}
		if !renewedKnown && !next.Equal(deadline) {
			t.Fatalf("without a known renewal: %s, want the deadline %s", next, deadline)
		}
		if renewedKnown && !renewed.Before(notBefore) && !renewed.After(notBefore.Add(pki.Backdate)) && lifetime > pki.Backdate && !next.Before(notAfter) {
			t.Fatalf("a certificate valid %s from %s, obtained at %s, is renewed at %s, not before it expires", lifetime, notBefore, renewed, next)
		}

		// Never earlier for a larger jitter, a later renewal or a longer interval.
		lo, hi := min(jitter, otherJitter), max(jitter, otherJitter)
		if a, b := NextRotation(notBefore, notAfter, renewed, interval, lo), NextRotation(notBefore, notAfter, renewed, interval, hi); b.Before(a) {
			t.Fatalf("jitter %v gives %s, before %s for jitter %v", hi, b, a, lo)
		}
		if renewedKnown {
			later := renewed.Add(time.Duration(otherJitterBits % uint64(year)))
			if b := NextRotation(notBefore, notAfter, later, interval, jitter); b.Before(next) {
				t.Fatalf("renewed later at %s gives %s, before %s for %s", later, b, next, renewed)
			}
		}
		longer := interval + time.Duration(otherJitterBits%uint64(year))
		if b := NextRotation(notBefore, notAfter, renewed, longer, jitter); b.Before(next) {
			t.Fatalf("interval %s gives %s, before %s for %s", longer, b, next, interval)
		}
	})
}

func abs(d int64) int64 {
	if d < 0 {
		return -d
	}
	return d
}
