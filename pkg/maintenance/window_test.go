package maintenance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/carousel-dev/carousel/pkg/rotation"
)

func TestParseWindow(t *testing.T) {
	for _, tc := range []struct {
		begin, end string
		length     time.Duration
		err        string
	}{
		{begin: "220000+0000", end: "230000+0000", length: time.Hour},
		{begin: "230000+0100", end: "010000+0100", length: 2 * time.Hour},
		{begin: "220000+0100", end: "220000+0000", length: time.Hour},
		{begin: "000000-0500", end: "053000-0500", length: 5*time.Hour + 30*time.Minute},
		{begin: "220000+0000", end: "221000+0000", err: "lasts 10m0s: it must last between 30m0s and 6h0m0s"},
		{begin: "220000+0000", end: "220000+0000", err: "lasts 0s"},
		{begin: "200000+0000", end: "030000+0000", err: "lasts 7h0m0s"},
		{begin: "2200+0000", end: "230000+0000", err: `begin "2200+0000": not a time of day in the form HHMMSS+ZZZZ`},
		{begin: "220000+0000", end: "250000+0000", err: `end "250000+0000"`},
		{begin: "220000", end: "230000+0000", err: `begin "220000"`},
	} {
		t.Run(tc.begin+"-"+tc.end, func(t *testing.T) {
			w, err := ParseWindow(tc.begin, tc.end)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w.Length() != tc.length {
				t.Errorf("length %s, want %s", w.Length(), tc.length)
			}
		})
	}
}

func TestWindowContainsAndNextOpening(t *testing.T) {
	// 23:00 to 01:00 at UTC+1 is 22:00 to 00:00 UTC.
	w, err := ParseWindow("230000+0100", "010000+0100")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		now      string
		contains bool
		next     string
	}{
		{now: "2026-11-24T21:59:59Z", contains: false, next: "2026-11-24T22:00:00Z"},
		{now: "2026-11-24T22:00:00Z", contains: true, next: "2026-11-25T22:00:00Z"},
		{now: "2026-11-24T23:59:59Z", contains: true, next: "2026-11-25T22:00:00Z"},
		{now: "2026-11-25T00:00:00Z", contains: false, next: "2026-11-25T22:00:00Z"},
		{now: "2026-11-25T00:30:00+01:00", contains: true, next: "2026-11-25T22:00:00Z"},
		{now: "2026-11-25T12:00:00Z", contains: false, next: "2026-11-25T22:00:00Z"},
	} {
		t.Run(tc.now, func(t *testing.T) {
			now := at(tc.now)
			if got := w.Contains(now); got != tc.contains {
				t.Errorf("Contains = %t, want %t", got, tc.contains)
			}
			if got := w.NextOpening(now); !got.Equal(at(tc.next)) {
				t.Errorf("NextOpening = %s, want %s", got.UTC().Format(time.RFC3339), tc.next)
			}
		})
	}
}

// FuzzWindow checks the window arithmetic: the next opening lies within a
// day after now, the window is open from it for its length and closed just
// before it, and now is inside exactly when the last opening is less than
// the length ago.
func FuzzWindow(f *testing.F) {
	f.Add(uint32(220000), int16(60), uint32(10000), int16(60), int64(0))
	f.Add(uint32(233000), int16(-300), uint32(13000), int16(-300), int64(86_399))
	f.Add(uint32(0), int16(0), uint32(60000), int16(840), int64(-1_000_000))
	f.Fuzz(func(t *testing.T, begin uint32, beginOffset int16, end uint32, endOffset int16, nowSeconds int64) {
		w, err := ParseWindow(layout(begin, beginOffset), layout(end, endOffset))
		if err != nil {
			return
		}
		now := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC).Add(time.Duration(nowSeconds%10_000_000) * time.Second)
		next := w.NextOpening(now)
		if !next.After(now) || next.Sub(now) > day {
			t.Fatalf("NextOpening(%s) = %s: not within a day after", now, next)
		}
		if !w.Contains(next) || !w.Contains(next.Add(w.Length()-time.Second)) {
			t.Fatalf("closed at %s or %s, within the window that opens at %s for %s", next, next.Add(w.Length()-time.Second), next, w.Length())
		}
		if w.Contains(next.Add(-time.Second)) || w.Contains(next.Add(w.Length())) {
			t.Fatalf("open just before %s or right at its end, %s later", next, w.Length())
		}
		last := next.Add(-day)
		if got, want := w.Contains(now), now.Sub(last) < w.Length(); got != want {
			t.Fatalf("Contains(%s) = %t, but the last opening was at %s for %s", now, got, last, w.Length())
		}
	})
}

// layout writes a fuzzed time of day (HHMMSS as a number) and offset (in
// minutes) in TimeLayout; out-of-range parts make strings ParseWindow refuses.
func layout(hhmmss uint32, offsetMinutes int16) string {
	sign, m := '+', int(offsetMinutes)
	if m < 0 {
		sign, m = '-', -m
	}
	return fmt.Sprintf("%06d%c%02d%02d", hhmmss%1_000_000, sign, m/60%100, m%60)
}

// rotation.AutomaticGrace, how long an automatic step may wait for its
// window before the manager recommends taking it by hand, covers a day until
// the next window opens and the longest window.
func TestAutomaticGraceCoversTheWaitForTheLongestWindow(t *testing.T) {
	if wait := 24*time.Hour + MaxWindow; rotation.AutomaticGrace < wait {
		t.Errorf("rotation.AutomaticGrace is %s, shorter than a day and the longest window, %s", rotation.AutomaticGrace, wait)
	}
}
