package redisx

import (
	"fmt"
	"testing"
)

func TestPartitionKeys_OneSlotEach(t *testing.T) {
	if got, want := PartitionKeys("orders", 0, 1).Events(), NewKeys("orders").Events(); got != want {
		t.Fatalf("one partition: %s, want the unpartitioned %s", got, want)
	}
	all := AllPartitionKeys("orders", 3)
	seen := map[string]bool{}
	for p, k := range all {
		if want := fmt.Sprintf("escf:{orders:%d}:events", p); k.Events() != want {
			t.Errorf("partition %d events key %s, want %s", p, k.Events(), want)
		}
		if want := fmt.Sprintf("escf:{orders:%d}:lease", p); k.Lease() != want {
			t.Errorf("partition %d lease key %s, want %s", p, k.Lease(), want)
		}
		if seen[k.Events()] {
			t.Errorf("partition %d shares its stream", p)
		}
		seen[k.Events()] = true
	}
}

func TestPartition_StableAndSpread(t *testing.T) {
	// Pinned values: the mapping is part of the feed's contract (consumers
	// and relays of different versions must agree), so it may never change.
	for shard, want := range []int{2, 5, 4} {
		if got := Partition("q0JTsSPT6n1WWBzcm4Ollg", shard, 8); got != want {
			t.Errorf("Partition(q0JTsSPT6n1WWBzcm4Ollg, %d, 8) = %d, want %d", shard, got, want)
		}
	}
	counts := make([]int, 6)
	for i := 0; i < 600; i++ {
		counts[Partition(fmt.Sprintf("uuid-%d", i/5), i%5, 6)]++
	}
	for p, c := range counts {
		if c < 60 || c > 140 {
			t.Errorf("partition %d got %d of 600 shards: the hash does not spread (%v)", p, c, counts)
		}
	}
	if Partition("x", 3, 1) != 0 || Partition("x", 3, 0) != 0 {
		t.Error("one partition (or none) must map everything to 0")
	}
}
