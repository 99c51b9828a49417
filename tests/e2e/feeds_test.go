package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// TestConsume_UnknownFeed (issue 23): consume on a feed no relay has
// written to exits 1 naming the feed and --wait-for-feed, and creates no
// key — not with --partitions, not with --bootstrap, not when a consumer
// group of an earlier version made the feed's stream. With --wait-for-feed
// (flag or ESCF_WAIT_FOR_FEED) it exits 1 once the wait is over, exits 0 on
// SIGTERM while it waits, and consumes once a relay starts on the feed.
func TestConsume_UnknownFeed(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	ix := c.Index("late")
	createIndex(t, c, ix, 2, 0)
	for i := range 10 {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/d%d", c.URL(), ix, i), fmt.Sprintf(`{"n":%d}`, i))
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	consume := func(feed string, extra ...string) []string {
		return append([]string{"consume", "--redis", srv.URL(), "--feed", feed, "--group", "g", "--sink", "stdout"}, extra...)
	}
	noKeys := func(t *testing.T) {
		t.Helper()
		if dbs := keyspace(t, rdb); len(dbs) != 0 {
			t.Fatalf("the Redis holds keys after consume of a feed that does not exist: %v (%v)", dbs, rdb.Keys(ctx, "*").Val())
		}
	}
	refused := []struct {
		name string
		env  []string
		args []string
		took time.Duration // at least
	}{
		{name: "no wait", args: consume("nosuchfeed")},
		{name: "partitions", args: consume("nosuchfeed", "--partitions", "3")},
		{name: "bootstrap", args: consume("nosuchfeed", append([]string{"--bootstrap"}, inspect(c).cliArgs()...)...)},
		{name: "wait over", args: consume("nosuchfeed", "--wait-for-feed", "1s"), took: time.Second},
		{name: "wait over, from the environment", env: []string{"ESCF_WAIT_FOR_FEED=1s"}, args: consume("nosuchfeed"), took: time.Second},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			began := time.Now()
			p := startBinaryWithEnv(t, tt.env, tt.args...)
			code := waitExit(t, p, 30*time.Second)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, p.out)
			}
			if d := time.Since(began); d < tt.took {
				t.Fatalf("exited after %s, before the %s wait was over:\n%s", d, tt.took, p.out)
			}
			if last := lastLine(p.out.String()); !strings.Contains(last, `feed "nosuchfeed" does not exist`) || !strings.Contains(last, "--wait-for-feed") {
				t.Errorf("the error line does not name the feed and --wait-for-feed: %s", last)
			}
			noKeys(t)
		})
	}
	t.Run("stopped while waiting", func(t *testing.T) {
		p := startBinary(t, consume("nosuchfeed", "--wait-for-feed", "1m")...)
		time.Sleep(time.Second)
		if p.cmd.ProcessState != nil {
			t.Fatalf("consume --wait-for-feed 1m exited at once:\n%s", p.out)
		}
		stopGracefully(t, p, "consume waiting for its feed")
		noKeys(t)
	})
	t.Run("stream a consumer group made", func(t *testing.T) {
		made := redisx.NewKeys("made")
		if err := rdb.XGroupCreateMkStream(ctx, made.Events(), "old", "0").Err(); err != nil {
			t.Fatal(err)
		}
		defer rdb.Del(ctx, made.Events())
		code, out := runBinary(t, 30*time.Second, consume("made")...)
		if code != 1 {
			t.Fatalf("exit %d, want 1:\n%s", code, out)
		}
		groups := rdb.XInfoGroups(ctx, made.Events()).Val()
		if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 1 || len(groups) != 1 || groups[0].Name != "old" {
			t.Fatalf("keys %v, groups %+v; want the stream alone, with its group old", keys, groups)
		}
	})

	t.Run("waits for the relay", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "events.jsonl")
		p := startBinary(t, "consume", "--redis", srv.URL(), "--feed", "late", "--group", "g", "--sink", "file", "--file-path", out,
			"--wait-for-feed", "2m", "--shutdown-timeout", "5s")
		time.Sleep(time.Second)
		if p.cmd.ProcessState != nil {
			t.Fatalf("consume --wait-for-feed 2m exited before the relay started:\n%s", p.out)
		}
		noKeys(t)
		f := startRelay(t, c, srv.URL(), "late", []string{ix}, nil)
		waitCaughtUp(t, c, f.store, []string{ix}, 30*time.Second)
		waitGroupDone(t, rdb, f.keys.Events(), "g", 30*time.Second)
		stopGracefully(t, p, "consume")
		if got := len(fileEvents(t, out)); got != 10 {
			t.Fatalf("the consumer that waited for the feed wrote %d events, want 10:\n%s", got, p.out)
		}
	})
}

// TestStatus_UnknownFeed (issue 23): status of a feed no relay has written
// to exits 1, as for any unhealthy feed, and its JSON says the feed does
// not exist and lists the feeds the Redis holds; it writes nothing.
func TestStatus_UnknownFeed(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	ix := c.Index("listed")
	createIndex(t, c, ix, 1, 0)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	mustDo(t, "PUT", c.URL()+"/"+ix+"/_doc/1", `{"n":1}`)
	f := startRelay(t, c, srv.URL(), "orders", []string{ix}, nil)
	waitCaughtUp(t, c, f.store, []string{ix}, 30*time.Second) // a commit: the feed exists
	f.halt()
	before := rdb.Keys(ctx, "*").Val()
	slices.Sort(before)
	for _, extra := range [][]string{nil, {"--partitions", "3"}} {
		t.Run(fmt.Sprint("status", extra), func(t *testing.T) {
			code, out := runBinary(t, 30*time.Second, append([]string{"status", "--redis", srv.URL(), "--feed", "ordres", "--json"}, extra...)...)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			var rep struct {
				Exists, Healthy *bool
				Feeds           []string
				FeedsComplete   bool `json:"feeds_complete"`
			}
			if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &rep); err != nil {
				t.Fatalf("status --json: %v:\n%s", err, out)
			}
			if rep.Exists == nil || *rep.Exists || rep.Healthy == nil || *rep.Healthy || !slices.Equal(rep.Feeds, []string{"orders"}) || !rep.FeedsComplete {
				t.Fatalf("status --json of a feed that does not exist:\n%s\nwant exists and healthy false, feeds [orders], complete", out)
			}
		})
	}
	code, out := runBinary(t, 30*time.Second, "status", "--redis", srv.URL(), "--feed", "ordres")
	if code != 1 {
		t.Fatalf("status (text) exit %d, want 1:\n%s", code, out)
	}
	after := rdb.Keys(ctx, "*").Val()
	slices.Sort(after)
	if !slices.Equal(before, after) {
		t.Fatalf("status of a feed that does not exist changed the keyspace:\nbefore %v\nafter  %v", before, after)
	}
	t.Logf("status:\n%s", out)
}
