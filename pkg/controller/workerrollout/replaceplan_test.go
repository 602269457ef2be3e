package workerrollout

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPlanReplace(t *testing.T) {
	after := time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)
	before, same, later := after.Add(-time.Hour), after, after.Add(time.Second)
	ready := func(name string, created time.Time) MachineState {
		return MachineState{Name: name, Created: created, Node: name, NodeReady: true}
	}
	for _, tt := range []struct {
		name     string
		machines []MachineState
		desired  int
		want     ReplacePlan
		done     bool
		message  string
	}{
		{"nothing rolled yet", []MachineState{ready("m-a", before), ready("m-b", before)}, 2,
			ReplacePlan{Desired: 2, Old: []string{"m-a", "m-b"}}, false,
			"pool p: MachineDeployment md: 0 of 2 machines replaced with a Ready node, 2 old to replace (m-a, m-b)"},
		{"a Machine created in the second of the rollout time is new, as Cluster API counts it",
			[]MachineState{ready("m-a", same), ready("m-c", later)}, 2,
			ReplacePlan{Desired: 2, Replaced: 2}, true, ""},
		{"a Machine created the second before is old",
			[]MachineState{ready("m-a", same.Add(-time.Second)), ready("m-c", later)}, 1,
			ReplacePlan{Desired: 1, Replaced: 1, Old: []string{"m-a"}}, false,
			"pool p: MachineDeployment md: 1 of 1 machines replaced with a Ready node, 1 old to replace (m-a)"},
		{"surge: one new Machine joining, the old one still there",
			[]MachineState{ready("m-a", before), {Name: "m-c", Created: later}}, 1,
			ReplacePlan{Desired: 1, Joining: 1, Old: []string{"m-a"}}, false,
			"pool p: MachineDeployment md: 0 of 1 machines replaced with a Ready node, 1 joining, 1 old to replace (m-a)"},
		{"a new Machine whose Node is not Ready yet is joining",
			[]MachineState{{Name: "m-c", Created: later, Node: "m-c"}}, 1,
			ReplacePlan{Desired: 1, Joining: 1}, false,
			"pool p: MachineDeployment md: 0 of 1 machines replaced with a Ready node, 1 joining"},
		{"an old Machine being deleted still holds the pool",
			[]MachineState{ready("m-c", later), {Name: "m-a", Created: before, Deleting: true, Node: "m-a", NodeReady: true}}, 1,
			ReplacePlan{Desired: 1, Replaced: 1, Old: []string{"m-a"}}, false,
			"pool p: MachineDeployment md: 1 of 1 machines replaced with a Ready node, 1 old to replace (m-a)"},
		{"a new Machine being deleted (scale-down) holds it too",
			[]MachineState{ready("m-c", later), {Name: "m-d", Created: later, Deleting: true}}, 1,
			ReplacePlan{Desired: 1, Replaced: 1, Leaving: 1}, false,
			"pool p: MachineDeployment md: 1 of 1 machines replaced with a Ready node, 1 being deleted"},
		{"every Machine replaced", []MachineState{ready("m-c", later), ready("m-d", later)}, 2,
			ReplacePlan{Desired: 2, Replaced: 2}, true, ""},
		{"fewer new Machines than desired", []MachineState{ready("m-c", later)}, 2,
			ReplacePlan{Desired: 2, Replaced: 1}, false,
			"pool p: MachineDeployment md: 1 of 2 machines replaced with a Ready node"},
		{"a pool scaled to zero is rolled", nil, 0, ReplacePlan{}, true, ""},
		{"many old Machines: three named", []MachineState{ready("m-1", before), ready("m-2", before), ready("m-3", before), ready("m-4", before), ready("m-5", before)}, 5,
			ReplacePlan{Desired: 5, Old: []string{"m-1", "m-2", "m-3", "m-4", "m-5"}}, false,
			"pool p: MachineDeployment md: 0 of 5 machines replaced with a Ready node, 5 old to replace (m-1, m-2, m-3, and 2 more)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := PlanReplace(tt.machines, tt.desired, after)
			if got.Desired != tt.want.Desired || got.Replaced != tt.want.Replaced || got.Joining != tt.want.Joining ||
				got.Leaving != tt.want.Leaving || !slices.Equal(got.Old, tt.want.Old) {
				t.Fatalf("PlanReplace = %+v, want %+v", got, tt.want)
			}
			if got.Done() != tt.done {
				t.Fatalf("Done = %v, want %v", got.Done(), tt.done)
			}
			if !tt.done {
				if msg := got.Message("p", "md"); msg != tt.message {
					t.Fatalf("Message =\n  %s\nwant\n  %s", msg, tt.message)
				}
			}
		})
	}
}

// FuzzPlanReplace: every Machine is counted once; the pool is never done
// while a Machine created before the rollout time is left, or while a Node
// is not Ready.
func FuzzPlanReplace(f *testing.F) {
	f.Add(uint8(2), []byte{0, 1, 2, 3, 4, 5})
	f.Add(uint8(0), []byte{})
	f.Fuzz(func(t *testing.T, desired uint8, spec []byte) {
		after := time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)
		var machines []MachineState
		for i, b := range spec {
			m := MachineState{Name: "m-" + strings.Repeat("x", i), Created: after.Add(time.Duration(int(b%5)-2) * time.Second), Deleting: b&8 != 0}
			if b&16 != 0 {
				m.Node, m.NodeReady = m.Name, b&32 != 0
			}
			machines = append(machines, m)
		}
		p := PlanReplace(machines, int(desired), after)
		if got := p.Replaced + p.Joining + p.Leaving + len(p.Old); got != len(machines) {
			t.Fatalf("%d machines counted, want %d", got, len(machines))
		}
		if !p.Done() {
			return
		}
		if p.Replaced != int(desired) {
			t.Fatalf("done with %d replaced, want %d", p.Replaced, desired)
		}
		for _, m := range machines {
			if m.Created.Before(after) || m.Deleting || !m.NodeReady {
				t.Fatalf("done with Machine %+v", m)
			}
		}
	})
}

func TestRolloutTime(t *testing.T) {
	const preparing, finalizing = "2026-11-24T19:00:00Z/Preparing", "2026-11-24T19:00:00Z/Finalizing"
	now := time.Date(2026, 11, 24, 20, 0, 0, 700_000_000, time.UTC)
	rolled := time.Date(2026, 11, 24, 19, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		name            string
		rolledFor       string
		recorded, field time.Time
		wantAfter       time.Time
		wantWrite       RolloutWrite
	}{
		{"never rolled: now, to the second", "", time.Time{}, time.Time{}, now.Truncate(time.Second), WriteRoll},
		{"rolled by someone else before: rolled again now", "", time.Time{}, rolled, now.Truncate(time.Second), WriteRoll},
		{"rolled for the last phase: rolled again now", preparing, rolled, rolled, now.Truncate(time.Second), WriteRoll},
		{"rolled for this phase without a recorded time: rolled again now", finalizing, time.Time{}, rolled, now.Truncate(time.Second), WriteRoll},
		{"rolled for this phase: waits on it, writes nothing", finalizing, rolled, rolled, rolled, WriteNothing},
		{"rolled again later by someone else: waits on the later time", finalizing, rolled, rolled.Add(time.Minute), rolled.Add(time.Minute), WriteNothing},
		{"moved earlier by someone else: set back", finalizing, rolled, rolled.Add(-time.Hour), rolled, WriteBack},
		{"a roll to come scheduled by someone else: waits on the recorded time, writes nothing", finalizing, rolled, now.Add(24 * time.Hour), rolled, WriteNothing},
		{"cleared by someone else: set back", finalizing, rolled, time.Time{}, rolled, WriteBack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			after, write := RolloutTime(tc.rolledFor, finalizing, tc.recorded, tc.field, now)
			if !after.Equal(tc.wantAfter) || write != tc.wantWrite {
				t.Errorf("RolloutTime = %v, %v; want %v, %v", after, write, tc.wantAfter, tc.wantWrite)
			}
		})
	}
}

// FuzzRolloutTime: once rolled for the phase, the rollout time waited on is
// never before the one Carousel recorded, nor in the future unless that one
// is; nothing is written only when the field is waited on as it is, or is
// in the future; a new roll is at the second of now.
func FuzzRolloutTime(f *testing.F) {
	f.Add("r/Preparing", "r/Preparing", int64(100), int64(50), int64(200))
	f.Add("", "r/Finalizing", int64(0), int64(0), int64(200))
	f.Add("r/Finalizing", "r/Finalizing", int64(100), int64(150), int64(200))
	f.Fuzz(func(t *testing.T, rolledFor, request string, recordedSec, fieldSec, nowNanos int64) {
		at := func(sec int64) time.Time {
			if sec <= 0 {
				return time.Time{}
			}
			return time.Unix(sec%(1<<40), 0).UTC()
		}
		recorded, field := at(recordedSec), at(fieldSec)
		now := time.Unix(0, nowNanos).UTC()
		after, write := RolloutTime(rolledFor, request, recorded, field, now)
		switch write {
		case WriteRoll:
			if !after.Equal(now.Truncate(time.Second)) {
				t.Fatalf("rolled at %v, want %v", after, now.Truncate(time.Second))
			}
		case WriteBack:
			if !after.Equal(recorded) || !field.Before(recorded) {
				t.Fatalf("set back to %v (recorded %v, field %v)", after, recorded, field)
			}
		case WriteNothing:
			waitsOnTheField := after.Equal(field)
			waitsOnTheRecordedTime := field.After(now) && after.Equal(recorded)
			if !waitsOnTheField && !waitsOnTheRecordedTime {
				t.Fatalf("waits on %v without writing it, field %v, now %v", after, field, now)
			}
			if after.After(now) && !recorded.After(now) {
				t.Fatalf("waits on %v, after now %v", after, now)
			}
		}
		if rolledFor == request && !recorded.IsZero() && after.Before(recorded) {
			t.Fatalf("waits on %v, before the recorded %v", after, recorded)
		}
	})
}
