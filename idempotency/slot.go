package idempotency

import (
	"strconv"
	"strings"
	"sync"
)

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// Slot is the Redis Cluster hash slot of key, by Redis's rule: when the key
// has a '{' and, after it, a '}' with at least one byte between them, only
// the bytes between the first '{' and the first '}' after it are hashed
// (the hash tag); otherwise the whole key is. The hash is CRC16-XMODEM mod
// 16384, as CLUSTER KEYSLOT computes it.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % Slots)
}

// SlotTag returns a short string whose hash slot is slot (0..16383; other
// values are taken mod 16384): a key containing "{" + SlotTag(s) + "}"
// before any other brace lives in slot s. The table is built once, by
// taking for each slot the first of "0", "1", … "z", "10", … (base 36)
// that hashes to it; it is part of the fence key contract and never
// changes (TestSlotTag pins it).
func SlotTag(slot int) string {
	return slotTags()[((slot%Slots)+Slots)%Slots]
}

var slotTags = sync.OnceValue(func() *[Slots]string {
	var t [Slots]string
	left := Slots
	for i := int64(0); left > 0; i++ {
		s := strconv.FormatInt(i, 36)
		if n := crc16(s) % Slots; t[n] == "" {
			t[n] = s
			left--
		}
	}
	return &t
})

// crc16 is CRC16-XMODEM (polynomial 0x1021, initial value 0), the hash
// of Redis Cluster.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
