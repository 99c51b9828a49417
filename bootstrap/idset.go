package bootstrap

import (
	"hash/fnv"
	"slices"
)

// docHash is a document's identity in an index for the reconciliation: its
// _id and routing (one _id with two routings is two documents). Two
// documents with one hash (about n²/2⁶⁵ for n documents) make the second
// look present: it is then kept, never wrongly deleted.
func docHash(id, routing string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(routing))
	return h.Sum64()
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

// has reports whether the document was in a view; the set must be sealed.
func (s *idSet) has(id, routing string) bool {
	_, ok := slices.BinarySearch(s.hashes, docHash(id, routing))
	return ok
}
