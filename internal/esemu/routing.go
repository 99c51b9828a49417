package esemu

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
)

// murmur3UTF16 hashes s the way Elasticsearch's Murmur3HashFunction does:
// murmur3_x86_32 with seed 0 over the string's UTF-16 code units, each
// written as two little-endian bytes.
func murmur3UTF16(s string) int32 {
	units := utf16.Encode([]rune(s))
	buf := make([]byte, 2*len(units))
	for i, u := range units {
		buf[2*i] = byte(u)
		buf[2*i+1] = byte(u >> 8)
	}
	return int32(murmur3x86_32(buf, 0))
}

// murmur3x86_32 is MurmurHash3_x86_32. It replaces
// github.com/spaolacci/murmur3's Sum32WithSeed, whose uintptr arithmetic
// aborts the process under -race (checkptr: "pointer arithmetic result
// points to invalid allocation", spaolacci/murmur3#34).
func murmur3x86_32(data []byte, seed uint32) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	h := seed
	n := len(data) / 4 * 4
	for i := 0; i < n; i += 4 {
		k := binary.LittleEndian.Uint32(data[i:])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	var k uint32
	switch tail := data[n:]; len(tail) {
	case 3:
		k ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		k ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		k ^= uint32(tail[0])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(len(data))
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// routingNumShards is index.number_of_routing_shards as Elasticsearch 7.0+
// computes it when the setting is absent:
// numShards * 2^max(1, 10 - ceil(log2(numShards))).
func routingNumShards(numShards int) int {
	log2NumShards := 32 - bits.LeadingZeros32(uint32(numShards-1))
	splits := 10 - log2NumShards
	if splits < 1 {
		splits = 1
	}
	return numShards << splits
}

// shardFor returns the shard a document routes to, by ES's IndexRouting:
// floorMod(hash, routingNumShards) / (routingNumShards / numShards), where hash
// is murmur3 over the routing value, or the id when there is none.
func shardFor(routingOrID string, numShards, numRoutingShards int) int {
	h := int64(murmur3UTF16(routingOrID))
	m := int64(numRoutingShards)
	mod := ((h % m) + m) % m
	return int(mod / int64(numRoutingShards/numShards))
}
