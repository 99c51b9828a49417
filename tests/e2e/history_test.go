package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// historyRig is a feed of 50 documents (one stream entry each) of which
// group g1 read and acknowledged 10, then the stream trimmed to its last
// 20 (XTRIM MAXLEN 20, as an operator or --max-stream-len may): g1 never
// read 20 changes that are gone.
func historyRig(t *testing.T) (*redistest.Server, *feed, string) {
	t.Helper()
	c := esCluster(t, esemu.Config{})
	ix := c.Index("lost")
	createIndex(t, c, ix, 1, 0)
	srv := redistest.Start(t)
	f := startRelay(t, c, srv.URL(), "lost", []string{ix}, nil)
	for i := 0; i < 50; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/d%d", c.URL(), ix, i), `{"n":1}`)
	}
	waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
	ctx := context.Background()
	if n := f.rdb.XLen(ctx, f.keys.Events()).Val(); n != 50 {
		t.Fatalf("%d entries, want 50", n)
	}
	f.rdb.XGroupCreate(ctx, f.keys.Events(), "g1", "0")
	res, err := f.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g1", Consumer: "earlier", Streams: []string{f.keys.Events(), ">"}, Count: 10}).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res[0].Messages {
		f.rdb.XAck(ctx, f.keys.Events(), "g1", m.ID)
	}
	f.rdb.XTrimMaxLen(ctx, f.keys.Events(), 20)
	return srv, f, res[0].Messages[9].ID
}

// TestHistoryLost_TrimmedGroup: the scenario. consume --group g1
// exits 1 with one message naming the group, the 20 entries missed and
// --bootstrap, handing its sink nothing; status reports the problem and
// exits 1; the metric says 20. The group is left as it was.
func TestHistoryLost_TrimmedGroup(t *testing.T) {
	srv, f, last := historyRig(t)
	ctx := context.Background()
	p := startBinary(t, "consume", "--redis", srv.URL(), "--feed", "lost", "--group", "g1", "--sink", "stdout")
	if code := waitExit(t, p, 15*time.Second); code != 1 {
		t.Fatalf("consume exited %d, want 1:\n%s", code, p.out)
	}
	out := p.out.String()
	for _, want := range []string{"history lost", `"g1"`, "20 entries", "consume --feed lost --group g1 --bootstrap"} {
		if !strings.Contains(out, want) {
			t.Fatalf("consume's output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("consume said:\n%s", out)
	if strings.Contains(out, `"op":"upsert"`) {
		t.Fatalf("the sink got events from a group that lost history:\n%s", out)
	}
	gs, err := f.rdb.XInfoGroups(ctx, f.keys.Events()).Result()
	if err != nil || len(gs) != 1 || gs[0].LastDeliveredID != last || gs[0].Pending != 0 {
		t.Fatalf("group after the refused run: %+v, %v; want it as it was (last delivered %s, nothing pending)", gs, err, last)
	}

	st := startBinary(t, "status", "--redis", srv.URL(), "--feed", "lost")
	if code := waitExit(t, st, 15*time.Second); code != 1 {
		t.Fatalf("status exited %d, want 1 (unhealthy):\n%s", code, st.out)
	}
	t.Logf("status said:\n%s", st.out)
	if s := st.out.String(); !strings.Contains(s, `history lost: consumer group "g1"`) || !strings.Contains(s, "20 entries") {
		t.Fatalf("status does not report g1's lost history:\n%s", s)
	}

	if got := lostMetric(t, f, "g1"); got != 20 {
		t.Fatalf("escf_group_history_lost_entries{group=g1} = %v, want 20", got)
	}
}

// TestHistoryLost_NewGroupOnTrimmedStream: a new group starting at 0 on a
// stream that no longer holds the feed from its start is refused (exit 1,
// no group created); --start '$' is allowed and creates it at the end.
func TestHistoryLost_NewGroupOnTrimmedStream(t *testing.T) {
	srv, f, _ := historyRig(t)
	ctx := context.Background()
	p := startBinary(t, "consume", "--redis", srv.URL(), "--feed", "lost", "--group", "g2", "--sink", "stdout")
	if code := waitExit(t, p, 15*time.Second); code != 1 {
		t.Fatalf("consume exited %d, want 1:\n%s", code, p.out)
	}
	for _, want := range []string{"no longer holds the feed from its start", "30 of 50", "--bootstrap", "--start '$'"} {
		if !strings.Contains(p.out.String(), want) {
			t.Fatalf("consume's output lacks %q:\n%s", want, p.out)
		}
	}
	if gs := f.rdb.XInfoGroups(ctx, f.keys.Events()).Val(); len(gs) != 1 {
		t.Fatalf("groups %+v: the refused group was created", gs)
	}
	q := startBinary(t, "consume", "--redis", srv.URL(), "--feed", "lost", "--group", "g2", "--start", "$", "--sink", "stdout")
	deadline := time.Now().Add(10 * time.Second)
	for len(f.rdb.XInfoGroups(ctx, f.keys.Events()).Val()) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("consume --start '$' did not create its group:\n%s", q.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopGracefully(t, q, "consume --start $")
	_, g, _, err := redisx.ReadGroup(ctx, f.rdb, f.keys.Events(), "g2")
	if err != nil || g.HistoryLost() || g.Lag != 0 {
		t.Fatalf("group g2 created at $: %+v, %v; want nothing lost, lag 0", g, err)
	}
}

// lostMetric is escf_group_history_lost_entries of a group, as a scrape
// of the feed's collector sees it.
func lostMetric(tb testing.TB, f *feed, group string) float64 {
	tb.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(redisx.NewStreamCollector(f.rdb, f.keys))
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "escf_group_history_lost_entries" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "group" && l.GetValue() == group {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	tb.Fatalf("no escf_group_history_lost_entries for group %s", group)
	return 0
}
