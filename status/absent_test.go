package status_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/status"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// TestGatherAbsent: the report of a feed that does not exist is unhealthy,
// carries the caller's problem, and lists the feeds the Redis holds; a
// user without +scan gets the report without the list, and why.
func TestGatherAbsent(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for _, k := range []string{redisx.NewKeys("orders").Meta(), redisx.PartitionKeys("users", 1, 2).Meta()} {
		rdb.HSet(ctx, k, "created", "2026-01-01T00:00:00Z")
	}
	rep := status.GatherAbsent(ctx, rdb, "ordres", "feed ordres does not exist")
	if rep.Exists || rep.Healthy || !slices.Equal(rep.Problems, []string{"feed ordres does not exist"}) ||
		!slices.Equal(rep.Feeds, []string{"orders", "users"}) || !rep.FeedsComplete || rep.FeedsError != "" {
		t.Fatalf("report %+v; want unhealthy, not existing, the problem, feeds orders and users", rep)
	}
	j, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(j, &got); err != nil {
		t.Fatal(err)
	}
	if got["exists"] != false || got["healthy"] != false || len(got["feeds"].([]any)) != 2 {
		t.Fatalf("JSON %s: want exists and healthy false, two feeds", j)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"feed ordres: DOES NOT EXIST", "! feed ordres does not exist", "feeds in this Redis: orders, users\n"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}

	srv.SetUser(t, "noscan", "pw", "%R~escf:{ordres}:*", "+type", "+xinfo|stream")
	limited := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "noscan", Password: "pw"})
	defer limited.Close()
	rep = status.GatherAbsent(ctx, limited, "ordres", "feed ordres does not exist")
	if rep.Healthy || len(rep.Feeds) != 0 || rep.FeedsComplete || !strings.Contains(rep.FeedsError, "NOPERM") {
		t.Fatalf("report without +scan %+v; want no feeds, incomplete, the NOPERM", rep)
	}
}
