package bootstrap

import (
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/es-changefeed/es-changefeed/sink"
)

// docHash is a document's identity in an index for the reconciliation, as
// a sink knows it: by _id and routing (one _id with two routings is two
// documents) when it does not know the shard, else by _id and shard. Two
// documents with one hash (about n²/2⁶⁴ for n documents) make the second
// look present: it is then kept, never wrongly deleted.
func docHash(id, routing string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("r\x00"))
	h.Write([]byte(routing))
	h.Write([]byte{0})
	h.Write([]byte(id))
	return h.Sum64()
}

// shardHash is docHash for a sink that knows the shard.
func shardHash(id string, shard int) uint64 {
	h := fnv.New64a()
	h.Write([]byte("s\x00"))
	h.Write([]byte(strconv.Itoa(shard)))
	h.Write([]byte{0})
	h.Write([]byte(id))
	return h.Sum64()
}

// heldHash is the identity of a document a sink holds.
func heldHash(h sink.HeldDoc) uint64 {
	if h.Shard >= 0 {
		return shardHash(h.ID, h.Shard)
	}
	return docHash(h.ID, h.Routing)
}

// idSet is the documents of an index's views: 8 bytes each, sorted once
// (seal) and then searched. A nil *idSet holds nothing and ignores adds.
type idSet struct {
	hashes []uint64
	sealed bool
}

func (s *idSet) addAll(hs []uint64) {
	if s != nil {
		s.hashes = append(s.hashes, hs...)
	}
}

func (s *idSet) seal() {
	slices.Sort(s.hashes)
	s.sealed = true
}

// has reports whether a held document was in a view; the set must be
// sealed.
func (s *idSet) has(h sink.HeldDoc) bool {
	_, ok := slices.BinarySearch(s.hashes, heldHash(h))
	return ok
}
