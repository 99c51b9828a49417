package idempotency_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/idempotency"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// slotKeys are keys that test Redis's hash-tag rule at its edges.
var slotKeys = []string{
	"", "foo", "123456789", "cache:orders:42", "{user1000}.following", "cache:{c}:orders:42",
	"{}", "{}x", "x{}", "x{}{y}", "{", "}", "}{", "a}b{c", "a{b", "a{b}", "a{b}c}", "{{a}}", "{a}{b}",
	"{ }", "cache:{index}:{id}", "ключ:{é}", "a\x00{b}",
}

func TestSlot(t *testing.T) {
	tests := []struct {
		key  string
		want int
	}{
		{"foo", 12182},                 // the Redis Cluster specification's example
		{"123456789", 0x31C3 % 16384},  // CRC16-XMODEM's check value
		{"{user1000}.following", 3443}, // the tag alone
		{"user1000", 3443},
		{"foo{}{bar}", idempotency.Slot("foo{}{bar}")},
	}
	for _, tt := range tests {
		if got := idempotency.Slot(tt.key); got != tt.want {
			t.Errorf("Slot(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
	for _, tt := range []struct{ a, b string }{
		{"x{}{y}", "x{}{y}"}, {"{a}{b}", "a"}, {"a{b}c}", "b"}, {"}{", "}{"}, {"a{b", "a{b"}, {"{}x", "{}x"},
	} {
		if got, want := idempotency.Slot(tt.a), idempotency.Slot(tt.b); got != want {
			t.Errorf("Slot(%q) = %d, want Slot(%q) = %d", tt.a, got, tt.b, want)
		}
	}
}

// TestSlotTag pins the table of slot tags: fence keys are named with it,
// so a change would orphan every fence written before.
func TestSlotTag(t *testing.T) {
	var all []string
	for s := range idempotency.Slots {
		tag := idempotency.SlotTag(s)
		if tag == "" || strings.ContainsAny(tag, "{}") {
			t.Fatalf("SlotTag(%d) = %q", s, tag)
		}
		if got := idempotency.Slot("{" + tag + "}"); got != s {
			t.Fatalf("SlotTag(%d) = %q, which is in slot %d", s, tag, got)
		}
		all = append(all, tag)
	}
	sum := sha256.Sum256([]byte(strings.Join(all, ",")))
	if got, want := hex.EncodeToString(sum[:]), slotTagsSHA256; got != want {
		t.Errorf("the slot tag table changed: sha256 %s, want %s", got, want)
	}
	if got, want := idempotency.SlotTag(0), "1bz"; got != want {
		t.Errorf("SlotTag(0) = %q, want %q", got, want)
	}
	if got, want := idempotency.SlotTag(16384+5), idempotency.SlotTag(5); got != want {
		t.Errorf("SlotTag(16389) = %q, want SlotTag(5) = %q", got, want)
	}
}

const slotTagsSHA256 = "a3215d917d1d893709d4388eac78ee4c1f29fd0325a1f1340103fbf56567281e"

// TestSlot_RedisCluster checks Slot and every SlotTag against CLUSTER
// KEYSLOT of a real Redis Cluster.
func TestSlot_RedisCluster(t *testing.T) {
	rc := redistest.StartCluster(t)
	c := rc.Client(t)
	ctx := context.Background()
	keys := append([]string(nil), slotKeys...)
	for s := range idempotency.Slots {
		keys = append(keys, "escf:fence:cache:{"+idempotency.SlotTag(s)+"}:uuid")
	}
	pipe := c.Pipeline()
	cmds := make([]interface{ Val() int64 }, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.ClusterKeySlot(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if got, want := idempotency.Slot(k), int(cmds[i].Val()); got != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}
