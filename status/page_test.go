package status

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

var pageAt = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func ptr(n int64) *int64 { return &n }

// richReport is a feed with two indices (one with global checkpoints, one
// without), two groups and the given problems.
func richReport(tb testing.TB, problems ...string) Report {
	tb.Helper()
	return Report{
		Feed:     "orders-feed",
		At:       pageAt,
		Created:  "2025-05-01T08:00:00Z",
		Healthy:  len(problems) == 0,
		Problems: problems,
		Lease:    Lease{Held: true, Owner: "relay-7f9c@host-a", Since: pageAt.Add(-3 * time.Hour), TTL: 7.5},
		Cluster:  "elasticsearch 9.1.0",
		Stream: Stream{Length: 12345, EntriesAdded: 9876543, FirstID: "1748772000000-0",
			LastID: "1748779199000-3", FirstAge: 7200, LastAge: 0.8},
		Groups: []Group{
			{Name: "search-indexer", Lag: 42, Pending: 7, OldestPendingIdle: 12, LastDelivered: "1748779190000-1",
				Consumers: []Consumer{{Name: "indexer-1", Pending: 4, Idle: 1}, {Name: "indexer-2", Pending: 3, Idle: 2}}},
			{Name: "audit-log", Lag: 0, LastDelivered: "1748779199000-3", Consumers: []Consumer{}},
		},
		DeadLetters: 3,
		Indices: []Index{
			{Name: "orders-v2", UUID: "u1", Target: "orders", Shards: []Shard{
				{Shard: 0, Checkpoint: 1000, GlobalCheckpoint: ptr(1040), Lag: ptr(40), LastCommit: pageAt.Add(-5 * time.Second)},
				{Shard: 1, Checkpoint: 2000, GlobalCheckpoint: ptr(2000), Lag: ptr(0), LastCommit: pageAt.Add(-90 * time.Second), Gap: 2},
			}},
			{Name: "legacy-items", UUID: "u2", Missing: true, Shards: []Shard{{Shard: 0, Checkpoint: -1}}},
		},
	}
}

// samples are n points 10s apart ending at pageAt.
func samples(n int) []Sample {
	h := make([]Sample, n)
	for i := range h {
		h[i] = Sample{At: pageAt.Add(time.Duration(i-n+1) * 10 * time.Second), EventsPerSecond: float64(i % 17), Lag: int64(i * 3 % 50)}
	}
	return h
}

func render(tb testing.TB, r Report, h []Sample) string {
	tb.Helper()
	var b bytes.Buffer
	if err := RenderPage(&b, r, h); err != nil {
		tb.Fatalf("RenderPage: %v", err)
	}
	return b.String()
}

func TestRenderPage(t *testing.T) {
	problems := []string{
		"group search-indexer lags by 42 entries (more than --max-lag 10)",
		"3 events in the dead-letter stream escf:orders-feed:dead",
	}
	tests := []struct {
		name     string
		report   Report
		samples  int
		want     []string
		wantNot  []string
		polyline int
	}{
		{
			name: "healthy, 90 samples", report: richReport(t), samples: 90, polyline: 2,
			want:    []string{">healthy<", "14m50s ago"},
			wantNot: []string{"UNHEALTHY", `class="problems"`, "collecting data"},
		},
		{
			name: "unhealthy, 1 sample", report: richReport(t, problems...), samples: 1,
			want:    append([]string{">UNHEALTHY<", "collecting data…"}, problems...),
			wantNot: []string{"<polyline", ">healthy<"},
		},
		{
			name: "unhealthy, no sample", report: richReport(t, problems[0]), samples: 0,
			want:    []string{">UNHEALTHY<", "collecting data…", problems[0]},
			wantNot: []string{"<polyline"},
		},
		{
			name: "2 samples", report: richReport(t), samples: 2, polyline: 2,
			want: []string{"10s ago"},
		},
	}
	common := []string{
		`<meta http-equiv="refresh" content="10">`,
		"<h1>orders-feed</h1>",
		"relay-7f9c@host-a", "expires in 8s", "3h0m0s ago", "elasticsearch 9.1.0",
		"orders-v2", "→ orders", "legacy-items", "missing in the cluster",
		">1,000<", ">1,040<", ">40<", ">2,000<", "5s ago", "1m30s ago", "never", ">-1<",
		"12,345 entries", "9,876,543 ever", "1748772000000-0", "2h0m0s old", "1748779199000-3",
		"search-indexer", "audit-log", "indexer-1", "indexer-2", "1748779190000-1", ">12s<",
		"dead letters", ">3<",
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := render(t, tt.report, samples(tt.samples))
			for _, s := range append(common, tt.want...) {
				if !strings.Contains(got, s) {
					t.Errorf("page lacks %q", s)
				}
			}
			for _, s := range tt.wantNot {
				if strings.Contains(got, s) {
					t.Errorf("page contains %q", s)
				}
			}
			if got, want := strings.Count(got, "<polyline "), tt.polyline; got != want {
				t.Errorf("%d polylines, want %d", got, want)
			}
			checkSelfContained(t, got)
		})
	}
}

func TestRenderPage_rows(t *testing.T) {
	got := render(t, richReport(t), nil)
	rows := regexp.MustCompile(`(?s)<tr><td>.*?</tr>`).FindAllString(got, -1)
	if len(rows) != 3 {
		t.Fatalf("%d shard rows, want 3:\n%s", len(rows), strings.Join(rows, "\n"))
	}
	// Shard 0 of legacy-items has no global checkpoint: dashes, not numbers.
	if got, want := strings.Count(rows[2], "–"), 2; got != want {
		t.Errorf("row without global checkpoint has %d dashes, want %d: %s", got, want, rows[2])
	}
	if strings.Contains(rows[0], "–") {
		t.Errorf("row with global checkpoint has a dash: %s", rows[0])
	}
}

func TestRenderPage_escapes(t *testing.T) {
	r := richReport(t, `bad <img src=x onerror=alert(2)>`)
	r.Feed = `<script>alert(1)</script>`
	r.Groups[0].Name = `"><b>g</b>`
	r.Lease.Owner = `<i>owner</i>`
	got := render(t, r, samples(5))
	for _, bad := range []string{"<script>alert(1)", "<img src=x", "<b>g</b>", "<i>owner</i>"} {
		if strings.Contains(got, bad) {
			t.Errorf("page contains unescaped %q", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(2)&gt;"} {
		if !strings.Contains(got, want) {
			t.Errorf("page lacks escaped %q", want)
		}
	}
	if strings.Contains(got, "<script") {
		t.Error("page has a <script> element")
	}
}

// checkSelfContained fails when the page refers to anything outside it.
func checkSelfContained(tb testing.TB, page string) {
	tb.Helper()
	for _, m := range regexp.MustCompile(`(?i)(src|href|action)\s*=\s*["']?([^"'\s>]*)`).FindAllStringSubmatch(page, -1) {
		if u := strings.ToLower(m[2]); strings.Contains(u, "//") || strings.HasPrefix(u, "data:") {
			tb.Errorf("external reference %s=%q", m[1], m[2])
		}
	}
	for _, bad := range []string{"http://", "https://", "@import", "url("} {
		if strings.Contains(page, bad) {
			tb.Errorf("page contains %q", bad)
		}
	}
}

func TestNewChart(t *testing.T) {
	t.Run("flat zero", func(t *testing.T) {
		c := newChart("lag", samples(3)[:2:2], func(Sample) float64 { return 0 })
		if got, want := c.Line, "0.0,150.0 600.0,150.0"; got != want {
			t.Errorf("Line = %q, want %q", got, want)
		}
		if got, want := c.Max, "0"; got != want {
			t.Errorf("Max = %q, want %q", got, want)
		}
	})
	t.Run("scaled", func(t *testing.T) {
		h := []Sample{{At: pageAt, Lag: 0}, {At: pageAt.Add(30 * time.Second), Lag: 2000}, {At: pageAt.Add(40 * time.Second), Lag: 500}}
		c := newChart("lag", h, func(s Sample) float64 { return float64(s.Lag) })
		if got, want := c.Line, "0.0,150.0 450.0,0.0 600.0,112.5"; got != want {
			t.Errorf("Line = %q, want %q", got, want)
		}
		if got, want := c.Max+" "+c.Now+" "+c.Span, "2.0k 500 40s"; got != want {
			t.Errorf("Max Now Span = %q, want %q", got, want)
		}
	})
	t.Run("one sample", func(t *testing.T) {
		if c := newChart("lag", samples(1), func(Sample) float64 { return 1 }); c.Line != "" || c.Area != "" {
			t.Errorf("chart of one sample has points: %+v", c)
		}
	})
}

func TestNum(t *testing.T) {
	tests := []struct {
		name string
		n    int64
		want string
	}{
		{"zero", 0, "0"}, {"small", 999, "999"}, {"thousand", 1000, "1,000"},
		{"million", 9876543, "9,876,543"}, {"negative", -1234, "-1,234"}, {"minus one", -1, "-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := num(tt.n); got != tt.want {
				t.Errorf("num(%d) = %q, want %q", tt.n, got, tt.want)
			}
		})
	}
}
