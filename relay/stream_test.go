package relay

import (
	"context"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

func TestStreamIDs(t *testing.T) {
	tests := []struct {
		a, b string
		less bool
	}{
		{"1-0", "1-1", true},
		{"1-9", "2-0", true},
		{"10-0", "9-99", false},
		{"5-5", "5-5", false},
		{"1700000000000-3", "1700000000000-12", true},
	}
	for _, tt := range tests {
		if got := lessID(tt.a, tt.b); got != tt.less {
			t.Errorf("lessID(%s, %s) = %v, want %v", tt.a, tt.b, got, tt.less)
		}
	}
	for in, want := range map[string]string{"0-0": "0-1", "1700000000000-12": "1700000000000-13", "garbage": "0-0"} {
		if got := nextID(in); got != want {
			t.Errorf("nextID(%s) = %s, want %s", in, got, want)
		}
	}
}

// A feed with no stream yet has no groups: not an error (trim and
// backpressure ask before the first commit).
func TestGroups_NoStreamYet(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	keys := redisx.NewKeys("nostream")
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: time.Second, Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{cfg: Config{Store: store}}
	gs, err := r.groups(context.Background())
	if err != nil || len(gs) != 0 {
		t.Fatalf("groups of a feed without a stream = %v, %v; want none and no error", gs, err)
	}
}
