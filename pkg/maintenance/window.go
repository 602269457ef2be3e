// Package maintenance decides when an operation queued with the
// carousel.dev/maintenance-operation annotation is carried out: inside the
// Cluster's daily maintenance time window, once the rotation's phase allows
// it. Everything here is a pure function of its arguments.
package maintenance

import (
	"fmt"
	"time"
)

// TimeLayout is how a window's ends are written: the time of day and its
// UTC offset, HHMMSS+ZZZZ (for example 220000+0100).
const TimeLayout = "150405-0700"

// The shortest and longest window.
const (
	MinWindow = 30 * time.Minute
	MaxWindow = 6 * time.Hour
)

const day = 24 * time.Hour

// Window is a daily time window. It may span midnight.
type Window struct {
	// begin is the window's opening as an offset from midnight UTC.
	begin time.Duration
	// length is how long it stays open.
	length time.Duration
}

// ParseWindow parses a window from its ends in TimeLayout and checks that it
// lasts between MinWindow and MaxWindow.
func ParseWindow(begin, end string) (Window, error) {
	b, err := timeOfDayUTC(begin)
	if err != nil {
		return Window{}, fmt.Errorf("begin %q: %w", begin, err)
	}
	e, err := timeOfDayUTC(end)
	if err != nil {
		return Window{}, fmt.Errorf("end %q: %w", end, err)
	}
	w := Window{begin: b, length: modDay(e - b)}
	if w.length < MinWindow || w.length > MaxWindow {
		return Window{}, fmt.Errorf("the window from %s to %s lasts %s: it must last between %s and %s", begin, end, w.length, MinWindow, MaxWindow)
	}
	return w, nil
}

// timeOfDayUTC is the time of day s (in TimeLayout) as an offset from
// midnight UTC.
func timeOfDayUTC(s string) (time.Duration, error) {
	t, err := time.Parse(TimeLayout, s)
	if err != nil {
		return 0, fmt.Errorf("not a time of day in the form HHMMSS+ZZZZ (e.g. 220000+0100)")
	}
	_, offset := t.Zone()
	clock := time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute + time.Duration(t.Second())*time.Second
	return modDay(clock - time.Duration(offset)*time.Second), nil
}

// modDay is d modulo a day, in [0, 24h).
func modDay(d time.Duration) time.Duration {
	d %= day
	if d < 0 {
		d += day
	}
	return d
}

// sinceMidnightUTC is how long after midnight UTC t is.
func sinceMidnightUTC(t time.Time) time.Duration {
	t = t.UTC()
	return t.Sub(time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC))
}

// Contains reports whether the window is open at t.
func (w Window) Contains(t time.Time) bool {
	return modDay(sinceMidnightUTC(t)-w.begin) < w.length
}

// NextOpening returns the first time after t at which the window opens.
func (w Window) NextOpening(t time.Time) time.Time {
	wait := modDay(w.begin - sinceMidnightUTC(t))
	if wait == 0 {
		wait = day
	}
	return t.Add(wait)
}

// Length is how long the window stays open each day.
func (w Window) Length() time.Duration { return w.length }
