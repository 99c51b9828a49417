package esemu

import (
	"math/bits"
	"unicode/utf16"

	"github.com/spaolacci/murmur3"
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
	return int32(murmur3.Sum32WithSeed(buf, 0))
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
