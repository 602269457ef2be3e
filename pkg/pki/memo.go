package pki

import (
	"crypto/sha256"
	"sync"
)

// memo remembers values by a SHA-256 digest, for at least the last size/2
// digests added or looked up and at most size. It keeps two generations of
// maps: a hit in the older one moves the entry to the newer, and once the
// newer holds size/2 entries it becomes the older and the older is dropped.
// An entry costs its digest and value in a map, 50 bytes of heap for a
// bool, where an LRU list (k8s.io/utils/lru) boxes the digest and links an
// element for each entry: 146 bytes (both measured with 13,000 to 52,000
// entries). A fleet of a thousand Clusters through two rotations fills them
// with tens of thousands.
type memo[V any] struct {
	mu         sync.Mutex
	half       int
	young, old map[[sha256.Size]byte]V
}

func newMemo[V any](size int) *memo[V] {
	return &memo[V]{half: max(size/2, 1), young: map[[sha256.Size]byte]V{}}
}

func (m *memo[V]) get(key [sha256.Size]byte) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.young[key]; ok {
		return v, true
	}
	v, ok := m.old[key]
	if ok {
		m.addLocked(key, v)
	}
	return v, ok
}

func (m *memo[V]) add(key [sha256.Size]byte, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.addLocked(key, v)
}

func (m *memo[V]) addLocked(key [sha256.Size]byte, v V) {
	if _, ok := m.young[key]; !ok && len(m.young) >= m.half {
		m.old, m.young = m.young, map[[sha256.Size]byte]V{}
	}
	m.young[key] = v
}
