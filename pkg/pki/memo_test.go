package pki

import (
	"crypto/sha256"
	"testing"
)

func TestMemo(t *testing.T) {
	key := func(i int) [sha256.Size]byte { return sha256.Sum256([]byte{byte(i)}) }
	tests := []struct {
		name string
		// added are added in order, then touched looked up, then later added.
		added, touched, later []int
		// kept are remembered after all of it, dropped not.
		kept, dropped []int
	}{
		{name: "within half the size", added: []int{1, 2}, kept: []int{1, 2}},
		{name: "a full younger half moves to the older", added: []int{1, 2, 3}, kept: []int{1, 2, 3}},
		{name: "the older half is dropped in turn", added: []int{1, 2, 3, 4, 5}, kept: []int{3, 4, 5}, dropped: []int{1, 2}},
		{name: "a hit in the older half moves it to the younger", added: []int{1, 2, 3}, touched: []int{1}, later: []int{4, 5},
			kept: []int{1, 3, 4, 5}, dropped: []int{2}},
		{name: "adding a digest again does not count twice", added: []int{1, 2, 2, 3, 4}, kept: []int{1, 2, 3, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMemo[int](4)
			for _, i := range tt.added {
				m.add(key(i), i)
			}
			for _, i := range tt.touched {
				if _, ok := m.get(key(i)); !ok {
					t.Fatalf("%d is not remembered before it is touched", i)
				}
			}
			for _, i := range tt.later {
				m.add(key(i), i)
			}
			// A get may move entries between generations: look without one.
			remembered := func(i int) (int, bool) {
				if v, ok := m.young[key(i)]; ok {
					return v, true
				}
				v, ok := m.old[key(i)]
				return v, ok
			}
			for _, i := range tt.kept {
				if v, ok := remembered(i); !ok || v != i {
					t.Errorf("%d is remembered as %d, %t; want %d, true", i, v, ok, i)
				}
			}
			for _, i := range tt.dropped {
				if _, ok := remembered(i); ok {
					t.Errorf("%d is still remembered", i)
				}
			}
		})
	}
}
