package esemu

import (
	"encoding/binary"
	"testing"
)

func TestMurmur3x86_32_ReferenceVectors(t *testing.T) {
	// MurmurHash3_x86_32 reference values over raw bytes, covering every
	// tail length (0-3 bytes after the 4-byte blocks).
	tests := []struct {
		in   string
		seed uint32
		want uint32
	}{
		{"", 0, 0},
		{"", 1, 0x514e28b7},
		{"a", 0, 0x3c2569b2},
		{"ab", 0, 0x9bbfd75f},
		{"abc", 0, 0xb3dd93fa},
		{"abcd", 0, 0x43ed676a},
		{"hello", 0, 0x248bfa47},
		{"The quick brown fox jumps over the lazy dog", 0, 0x2e4ff723},
	}
	for _, tt := range tests {
		if got := murmur3x86_32([]byte(tt.in), tt.seed); got != tt.want {
			t.Errorf("murmur3x86_32(%q, %d) = %#x, want %#x", tt.in, tt.seed, got, tt.want)
		}
	}
}

func TestMurmur3UTF16_ESVectors(t *testing.T) {
	// ES's Murmur3HashFunction vectors: murmur3_x86_32, seed 0, over the
	// string's UTF-16LE bytes (FACTS.md).
	tests := []struct {
		name string
		in   string
		want uint32
	}{
		{name: "hell", in: "hell", want: 0x5a0cb7c3},
		{name: "hello", in: "hello", want: 0xd7c31989},
		{name: "hello w", in: "hello w", want: 0x22ab2984},
		{name: "fox", in: "The quick brown fox jumps over the lazy dog", want: 0xe07db09c},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := uint32(murmur3UTF16(tt.in)); got != tt.want {
				t.Errorf("murmur3UTF16(%q) = %#x, want %#x", tt.in, got, tt.want)
			}
		})
	}
}

func TestMurmur3UTF16_EncodesLittleEndianCodeUnits(t *testing.T) {
	// ES hashes each UTF-16 code unit as two little-endian bytes; a
	// character outside the BMP is two code units (a surrogate pair).
	for _, s := range []string{"1", "doc-42", "é", "😀x"} {
		var buf []byte
		for _, r := range s {
			if r >= 0x10000 {
				r -= 0x10000
				buf = binary.LittleEndian.AppendUint16(buf, uint16(0xD800+(r>>10)))
				buf = binary.LittleEndian.AppendUint16(buf, uint16(0xDC00+(r&0x3FF)))
				continue
			}
			buf = binary.LittleEndian.AppendUint16(buf, uint16(r))
		}
		want := int32(murmur3x86_32(buf, 0))
		if got := murmur3UTF16(s); got != want {
			t.Errorf("murmur3UTF16(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestRoutingNumShards(t *testing.T) {
	tests := []struct{ shards, want int }{
		{1, 1024}, {2, 1024}, {3, 768}, {5, 640}, {9, 576}, {512, 1024}, {1024, 2048},
	}
	for _, tt := range tests {
		if got := routingNumShards(tt.shards); got != tt.want {
			t.Errorf("routingNumShards(%d) = %d, want %d", tt.shards, got, tt.want)
		}
	}
}

func TestShardFor_FloorModOfNegativeHash(t *testing.T) {
	// A negative hash must map with floorMod, not Go's truncated %.
	for _, id := range []string{"1", "2", "3", "4", "5", "a", "b", "hello", "user-17"} {
		h := int64(murmur3UTF16(id))
		for _, n := range []int{1, 2, 3, 5, 9} {
			rns := routingNumShards(n)
			want := int((((h % int64(rns)) + int64(rns)) % int64(rns)) / int64(rns/n))
			got := shardFor(id, n, rns)
			if got != want || got < 0 || got >= n {
				t.Errorf("shardFor(%q, %d) = %d, want %d in [0,%d)", id, n, got, want, n)
			}
		}
	}
}
