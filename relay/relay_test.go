package relay

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
)

func TestConfig_ValidatePartitions(t *testing.T) {
	base := Config{ES: &es.Client{}, Store: &checkpoint.Store{}, Lease: &redisx.Lease{}, Targets: []string{"a"}}
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{name: "unpartitioned", mod: func(*Config) {}},
		{name: "partition 5 of 6", mod: func(c *Config) { c.Partitions, c.Partition = 6, 5 }},
		{name: "partition 6 of 6", mod: func(c *Config) { c.Partitions, c.Partition = 6, 6 }, wantErr: "Partition = 6: want 0..5"},
		{name: "negative partition", mod: func(c *Config) { c.Partitions, c.Partition = 6, -1 }, wantErr: "Partition = -1"},
		{name: "partition without partitions", mod: func(c *Config) { c.Partition = 1 }, wantErr: "Partition = 1: want 0..0"},
		{name: "too many", mod: func(c *Config) { c.Partitions = 1025 }, wantErr: "Partitions = 1025: want 1..1024"},
		{name: "resync of a partition", mod: func(c *Config) { c.Partitions, c.Partition, c.Snapshot = 2, 1, true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.mod(&c)
			checkValidate(t, c.Validate(), tt.wantErr)
		})
	}
}

// checkValidate fails tb unless err is nil (wantErr "") or contains
// wantErr.
func checkValidate(tb testing.TB, err error, wantErr string) {
	tb.Helper()
	switch {
	case wantErr == "" && err != nil:
		tb.Fatalf("Validate() = %v, want nil", err)
	case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
		tb.Fatalf("Validate() = %v, want an error containing %q", err, wantErr)
	}
}

func TestRelay_Owns(t *testing.T) {
	uuid := "q0JTsSPT6n1WWBzcm4Ollg"
	one := &Relay{}
	for shard := range 5 {
		if !one.owns(uuid, shard) {
			t.Fatalf("an unpartitioned relay does not own shard %d", shard)
		}
	}
	owners := map[int]int{}
	for p := range 8 {
		r := &Relay{cfg: Config{Partitions: 8, Partition: p}}
		for shard := range 3 {
			if r.owns(uuid, shard) {
				owners[shard]++
				if want := redisx.Partition(uuid, shard, 8); want != p {
					t.Errorf("partition %d owns shard %d of partition %d", p, shard, want)
				}
			}
		}
	}
	for shard := range 3 {
		if owners[shard] != 1 {
			t.Errorf("shard %d has %d owners, want 1", shard, owners[shard])
		}
	}
}

// TestSayOpen_OnlyAfterARoundThatBeganClosed: a round that began before the
// index was said closed may still succeed; it must not report a reopening,
// or the next closed round warns a second time (TestTargets_ClosedIndex…
// flaked on that).
func TestSayOpen_OnlyAfterARoundThatBeganClosed(t *testing.T) {
	var out strings.Builder
	r := &Relay{log: slog.New(slog.NewTextHandler(&out, nil))}
	before := r.roundNote()
	r.sayClosed("shut-1", "shut-*")
	r.sayOpen("shut-1", before) // the round begun before the close succeeded
	r.sayClosed("shut-1", "shut-*")
	if n := strings.Count(out.String(), "index is closed"); n != 1 {
		t.Fatalf("closed warning logged %d times, want once:\n%s", n, &out)
	}
	if strings.Contains(out.String(), "index reopened") {
		t.Fatalf("a round begun before the close reported a reopening:\n%s", &out)
	}
	r.sayOpen("shut-1", r.roundNote())
	if n := strings.Count(out.String(), "index reopened"); n != 1 {
		t.Fatalf("reopening logged %d times, want once:\n%s", n, &out)
	}
	r.sayClosed("shut-1", "shut-*")
	if n := strings.Count(out.String(), "index is closed"); n != 2 {
		t.Fatalf("closing again after the reopening logged %d warnings, want 2:\n%s", n, &out)
	}
}
