package reconciler

import (
	"hash/maphash"
	"iter"
	"maps"
)

// shardCount is how many parts a published map is split into: a sync
// copies only the parts it writes to, so at 10,000 virtual servers an
// incremental sync copies a few dozen entries, not the table.
const shardCount = 256

// shardedMap is a map split into shards by the hash of its keys. Once
// published in a View it is never changed.
type shardedMap[K comparable, V any] struct {
	seed   maphash.Seed
	shards *[shardCount]map[K]V
}

func (m *shardedMap[K, V]) shard(k K) int {
	return int(maphash.Comparable(m.seed, k) % shardCount)
}

func (m *shardedMap[K, V]) get(k K) (V, bool) {
	v, ok := m.shards[m.shard(k)][k]
	return v, ok
}

func (m *shardedMap[K, V]) len() int {
	n := 0
	for _, s := range m.shards {
		n += len(s)
	}
	return n
}

// all yields every entry, in no order.
func (m *shardedMap[K, V]) all() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for _, s := range m.shards {
			for k, v := range s {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// keys yields every key, in no order.
func (m *shardedMap[K, V]) keys() iter.Seq[K] {
	return func(yield func(K) bool) {
		for k := range m.all() {
			if !yield(k) {
				return
			}
		}
	}
}

// cowMap is the writing side of a shardedMap that is published after each
// sync: the first change to a shard after a publish copies that shard (and
// the shard array), so what was published stays as it was (copy on write)
// and a map the sync did not change is published again as it was.
type cowMap[K comparable, V any] struct {
	shardedMap[K, V]
	dirty bool             // the shard array was copied since the last publish
	owned [shardCount]bool // shards copied since the last publish
}

func newCowMap[K comparable, V any]() cowMap[K, V] {
	return cowMap[K, V]{shardedMap: shardedMap[K, V]{seed: maphash.MakeSeed(), shards: new([shardCount]map[K]V)}, dirty: true}
}

// own returns shard i, copied first if it may be published.
func (c *cowMap[K, V]) own(i int) map[K]V {
	if !c.dirty {
		shards := *c.shards
		c.shards, c.dirty = &shards, true
	}
	if !c.owned[i] {
		c.shards[i] = maps.Clone(c.shards[i])
		if c.shards[i] == nil {
			c.shards[i] = map[K]V{}
		}
		c.owned[i] = true
	}
	return c.shards[i]
}

func (c *cowMap[K, V]) set(k K, v V) { c.own(c.shard(k))[k] = v }

func (c *cowMap[K, V]) delete(k K) {
	if i := c.shard(k); len(c.shards[i]) > 0 {
		if _, ok := c.shards[i][k]; ok {
			delete(c.own(i), k)
		}
	}
}

// publish returns the map as it is now; the next change copies again.
func (c *cowMap[K, V]) publish() shardedMap[K, V] {
	if c.dirty {
		c.owned, c.dirty = [shardCount]bool{}, false
	}
	return c.shardedMap
}
