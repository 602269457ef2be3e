package workerrollout

import (
	"fmt"
	"strings"
	"time"
)

// RolloutWrite is what Carousel writes on a MachineDeployment's rollout time.
type RolloutWrite int

const (
	// WriteNothing means the MachineDeployment was rolled for the phase.
	WriteNothing RolloutWrite = iota
	// WriteRoll means rolling it for the phase.
	WriteRoll
	// WriteBack means setting its rollout time back to the one Carousel recorded.
	WriteBack
)

// RolloutTime says which rollout time a Replace pool's MachineDeployment
// waits on for request (the rotation phase it is rolled for), and what
// Carousel must write there. rolledFor and recorded are what Carousel
// recorded on the MachineDeployment when it last rolled it, field its rollout
// time now (zero when none is set).
//
//   - Not rolled for request yet: now, to the second (Cluster API waits for a
//     rollout time in the future), written.
//   - Rolled for request, and the field was moved before the recorded time or
//     cleared by another writer: the recorded time, written back. Machines
//     created before it did not bootstrap on the phase's credentials, and
//     Cluster API would keep them.
//   - Rolled for request, the field later than now (another writer
//     scheduled a roll to come): the recorded time, nothing to write.
//     Cluster API replaces nothing until then, and the Machines it made
//     since the recorded time bootstrapped on the phase's credentials.
//   - Rolled for request, the field at the recorded time or later, up to
//     now (another writer rolled the MachineDeployment again since): the
//     field, which Cluster API replaces by; nothing to write.
func RolloutTime(rolledFor, request string, recorded, field, now time.Time) (time.Time, RolloutWrite) {
	switch {
	case rolledFor != request || recorded.IsZero():
		return now.Truncate(time.Second), WriteRoll
	case field.Before(recorded):
		return recorded, WriteBack
	case field.After(now):
		return recorded, WriteNothing
	default:
		return field, WriteNothing
	}
}

// MachineState is what a Replace rollout knows of one Machine of the pool's
// MachineDeployment.
type MachineState struct {
	Name    string
	Created time.Time
	// Deleting is set once the Machine has a deletionTimestamp.
	Deleting bool
	// Node is the Machine's status.nodeRef; empty until its kubelet registered.
	Node string
	// NodeReady is whether that Node reports Ready.
	NodeReady bool
}

// ReplacePlan is where a Replace rollout stands.
type ReplacePlan struct {
	// Desired is the MachineDeployment's spec.replicas.
	Desired int
	// Replaced counts the Machines created at or after the rollout time whose
	// Node is Ready: they bootstrapped on the credentials of the phase.
	Replaced int
	// Joining counts the Machines created at or after the rollout time whose
	// Node is not Ready yet.
	Joining int
	// Old are the Machines created before the rollout time, deleted or not
	// yet: Cluster API replaces exactly those.
	Old []string
	// Leaving counts the new Machines being deleted (a scale-down).
	Leaving int
}

// PlanReplace says where the replacement of a MachineDeployment's Machines
// stands, after is the rollout time Carousel set on it. A Machine counts as
// old if it was created before that time, as Cluster API counts a MachineSet
// outdated: one created in the same second is new to both (creation times
// have whole seconds; the rollout time is the second the preconditions held
// in, so such a Machine bootstrapped on the phase's credentials too).
func PlanReplace(machines []MachineState, desired int, after time.Time) ReplacePlan {
	p := ReplacePlan{Desired: desired}
	for _, m := range machines {
		switch {
		case m.Created.Before(after):
			p.Old = append(p.Old, m.Name)
		case m.Deleting:
			p.Leaving++
		case m.Node != "" && m.NodeReady:
			p.Replaced++
		default:
			p.Joining++
		}
	}
	return p
}

// Done reports whether every Machine was replaced: no old one left, exactly
// the desired number of new ones, each with a Ready Node.
func (p ReplacePlan) Done() bool {
	return len(p.Old) == 0 && p.Leaving == 0 && p.Joining == 0 && p.Replaced == p.Desired
}

// Message says where the pool stands, for the Cluster's CARotation condition.
func (p ReplacePlan) Message(pool, machineDeployment string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pool %s: MachineDeployment %s: %d of %d machines replaced with a Ready node", pool, machineDeployment, p.Replaced, p.Desired)
	if p.Joining > 0 {
		fmt.Fprintf(&b, ", %d joining", p.Joining)
	}
	if n := len(p.Old); n > 0 {
		const shown = 3
		names := p.Old[:min(n, shown)]
		fmt.Fprintf(&b, ", %d old to replace (%s", n, strings.Join(names, ", "))
		if n > shown {
			fmt.Fprintf(&b, ", and %d more", n-shown)
		}
		b.WriteString(")")
	}
	if p.Leaving > 0 {
		fmt.Fprintf(&b, ", %d being deleted", p.Leaving)
	}
	return b.String()
}
