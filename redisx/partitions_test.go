package redisx_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

func TestPartitionRecord_Check(t *testing.T) {
	tests := []struct {
		name     string
		rec      redisx.PartitionRecord
		passed   int
		wantErr  string // "" for no error
		recorded int
	}{
		{name: "new feed, one partition", rec: redisx.PartitionRecord{}, passed: 1},
		{name: "new feed, six partitions", rec: redisx.PartitionRecord{}, passed: 6},
		{name: "unpartitioned feed, one partition", rec: redisx.PartitionRecord{Unpartitioned: true}, passed: 1},
		{name: "unpartitioned feed, zero means one", rec: redisx.PartitionRecord{Unpartitioned: true}, passed: 0},
		{name: "same count", rec: redisx.PartitionRecord{Partitions: 6}, passed: 6},
		{name: "other count", rec: redisx.PartitionRecord{Partitions: 6}, passed: 4, recorded: 6,
			wantErr: "feed f has 6 partitions (escf:{f}:meta partitions), not 4: use 6, or start a new feed; changing the partition count of a feed is not supported"},
		{name: "partitioned feed, one partition", rec: redisx.PartitionRecord{Partitions: 3}, passed: 1, recorded: 3,
			wantErr: "not 1: use 3"},
		{name: "unpartitioned feed, three partitions", rec: redisx.PartitionRecord{Unpartitioned: true}, passed: 3, recorded: 1,
			wantErr: "feed f exists with one partition (escf:{f}:meta has no partitions field), not 3: use 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.rec.Check("f", tt.passed)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Check: %v, want nil", err)
				}
				return
			}
			var pe *redisx.PartitionsError
			if !errors.As(err, &pe) {
				t.Fatalf("Check: %v, want a *PartitionsError", err)
			}
			if got, want := pe.Recorded, tt.recorded; got != want {
				t.Errorf("Recorded = %d, want %d", got, want)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q\nwant it to contain %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "--") {
				t.Errorf("error %q names a flag: only the CLI does", err)
			}
		})
	}
}

func TestReadPartitions(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()

	got, err := redisx.ReadPartitions(ctx, rdb, "fresh")
	if err != nil || got != (redisx.PartitionRecord{}) {
		t.Fatalf("fresh feed: %+v, %v; want no record", got, err)
	}

	rdb.HSet(ctx, redisx.NewKeys("old").Meta(), "created", "2026-01-01T00:00:00Z")
	got, err = redisx.ReadPartitions(ctx, rdb, "old")
	if err != nil || got != (redisx.PartitionRecord{Unpartitioned: true}) {
		t.Fatalf("unpartitioned feed: %+v, %v", got, err)
	}
	if err := redisx.RecordPartitions(ctx, rdb, "old", 4); err == nil {
		t.Fatal("RecordPartitions(4) on an unpartitioned feed: nil error")
	}
	if v := rdb.HGet(ctx, redisx.NewKeys("old").Meta(), redisx.MetaPartitions).Val(); v != "" {
		t.Fatalf("a refused RecordPartitions wrote %q", v)
	}

	if err := redisx.RecordPartitions(ctx, rdb, "new", 6); err != nil {
		t.Fatal(err)
	}
	if err := redisx.RecordPartitions(ctx, rdb, "new", 6); err != nil {
		t.Fatalf("recording the same count again: %v", err)
	}
	got, err = redisx.ReadPartitions(ctx, rdb, "new")
	if err != nil || got != (redisx.PartitionRecord{Partitions: 6}) {
		t.Fatalf("recorded feed: %+v, %v", got, err)
	}
	var pe *redisx.PartitionsError
	if err := redisx.CheckPartitions(ctx, rdb, "new", 4); !errors.As(err, &pe) || pe.Recorded != 6 || pe.Passed != 4 {
		t.Fatalf("CheckPartitions(4) on a 6-partition feed: %v", err)
	}
	if err := redisx.RecordPartitions(ctx, rdb, "new", 1); !errors.As(err, &pe) {
		t.Fatalf("RecordPartitions(1) on a 6-partition feed: %v", err)
	}

	rdb.HSet(ctx, redisx.NewKeys("bad").Meta(), redisx.MetaPartitions, "six")
	if _, err := redisx.ReadPartitions(ctx, rdb, "bad"); !errors.Is(err, redisx.ErrBadPartitions) || !strings.Contains(err.Error(), `"six"`) {
		t.Fatalf("bad record: %v", err)
	}
}
