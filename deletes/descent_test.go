package deletes

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/es-changefeed/es-changefeed/es"
)

// fakeShard is a shard whose seq nos 0..n-1 were each a document the feed
// delivered, of which gone are no longer live (deleted, or updated: their
// new versions are moved, live seq nos at or above n, delivered too).
// It answers counts and histograms as es.Client does, checking each
// request's bounds like es.Client, and counts the requests.
type fakeShard struct {
	n           int64
	gone, moved []int64 // sorted
	counts      int     // SeqNoCounts requests
	histograms  int     // SeqNoHistogram requests
	spans       int     // spans asked in SeqNoCounts
	// cost is what the requests cost OpenSearch 2.19 by the model of
	// docs/PERFORMANCE.md, in ns: range counts (documents the query, the
	// spans' union, matches) × (25 + 6·spans), a histogram (documents)
	// × 90.
	cost float64
}

// union is how many live documents the spans' union holds.
func (f *fakeShard) union(spans []es.SeqSpan) int64 {
	s := slices.Clone(spans)
	slices.SortFunc(s, func(a, b es.SeqSpan) int { return int(a.After - b.After) })
	var n int64
	end := int64(-2)
	for _, x := range s {
		lo := max(x.After, end)
		if x.UpTo > lo {
			n += f.live(lo+1, x.UpTo)
		}
		end = max(end, x.UpTo)
	}
	return n
}

func newFakeShard(n int64, gone, moved []int64) *fakeShard {
	f := &fakeShard{n: n, gone: slices.Clone(gone), moved: slices.Clone(moved)}
	slices.Sort(f.gone)
	slices.Sort(f.moved)
	return f
}

// in is how many of sorted xs lie in [lo, hi].
func in(xs []int64, lo, hi int64) int64 {
	i, _ := slices.BinarySearch(xs, lo)
	j, _ := slices.BinarySearch(xs, hi+1)
	return int64(j - i)
}

// live is the number of live documents with seq no in [lo, hi].
func (f *fakeShard) live(lo, hi int64) int64 {
	lo = max(lo, 0)
	var c int64
	if a, b := lo, min(hi, f.n-1); b >= a {
		c = b - a + 1 - in(f.gone, a, b)
	}
	return c + in(f.moved, lo, hi)
}

func (f *fakeShard) SeqNoCounts(_ context.Context, _ string, _ int, _ string, spans []es.SeqSpan) ([]int64, error) {
	f.counts++
	f.spans += len(spans)
	if len(spans) == 0 || len(spans) > es.MaxCountSpans {
		return nil, fmt.Errorf("%d spans", len(spans))
	}
	f.cost += float64(f.union(spans)) * float64(25+6*len(spans))
	out := make([]int64, len(spans))
	for i, s := range spans {
		if s.UpTo <= s.After {
			return nil, fmt.Errorf("empty span %+v", s)
		}
		out[i] = f.live(s.After+1, s.UpTo)
	}
	return out, nil
}

func (f *fakeShard) SeqNoHistogram(_ context.Context, _ string, _ int, _ string, spans []es.SeqSpan, interval int64) (map[int64]int64, error) {
	f.histograms++
	if len(spans) == 0 || len(spans) > es.MaxHistogramSpans {
		return nil, fmt.Errorf("%d spans", len(spans))
	}
	f.cost += float64(f.union(spans)) * 90
	out := map[int64]int64{}
	var buckets int64
	for i, s := range spans {
		if s.UpTo <= s.After || (i > 0 && s.After < spans[i-1].UpTo) {
			return nil, fmt.Errorf("span %+v empty or out of order", s)
		}
		buckets += s.UpTo/interval - (s.After+1)/interval + 1
		for b := (s.After + 1) / interval; b <= s.UpTo/interval; b++ {
			if c := f.live(max(b*interval, s.After+1), min(b*interval+interval-1, s.UpTo)); c > 0 {
				out[b*interval] += c
			}
		}
	}
	if buckets > es.MaxHistogramBuckets {
		return nil, fmt.Errorf("%d buckets", buckets)
	}
	return out, nil
}

// feedCounts are the feed's counts by range: an entry for each seq no in
// (origin, n) and each moved one.
func (f *fakeShard) feedCounts(origin int64) map[int64]int64 {
	c := map[int64]int64{}
	for r := max(origin+1, 0) / K; r*K < f.n; r++ {
		lo, hi := max(r*K, origin+1), min(r*K+K, f.n)
		if hi > lo {
			c[r] = hi - lo
		}
	}
	for _, s := range f.moved {
		c[s/K]++
	}
	return c
}

// want is what a descent must find: the ranges holding a gone seq no
// above origin, and the live documents in (origin, cp].
func (f *fakeShard) want(origin, cp int64) ([]int64, int64) {
	var differ []int64
	for _, s := range f.gone {
		if s > origin {
			differ = append(differ, s/K)
		}
	}
	slices.Sort(differ)
	return slices.Compact(differ), f.live(origin+1, cp)
}

func (f *fakeShard) cp() int64 {
	cp := f.n - 1
	if len(f.moved) > 0 {
		cp = max(cp, f.moved[len(f.moved)-1])
	}
	return cp
}

// randomChanges: k seq nos below n gone, of which about half updated
// (their new versions moved to distinct seq nos from n on).
func randomChanges(rng *rand.Rand, n int64, k int) (gone, moved []int64) {
	seen := map[int64]bool{}
	for len(gone) < k && int64(len(gone)) < n {
		s := rng.Int64N(n)
		if seen[s] {
			continue
		}
		seen[s] = true
		gone = append(gone, s)
		if rng.IntN(2) == 0 {
			moved = append(moved, n+int64(len(moved))*int64(1+rng.IntN(3)))
		}
	}
	return gone, moved
}

// TestDescent_FindsTheRangesThatDiffer: over random shards (sizes from a
// few ranges to 1,000,000 seq nos, origins, deletes and updates) the
// descent finds exactly the ranges holding a document gone since it was
// delivered, and the shard's live count, with or without points.
func TestDescent_FindsTheRangesThatDiffer(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 1))
	for i := 0; i < 200; i++ {
		n := []int64{1, 50, 64, 65, 1000, 70_000, 300_000, 1_000_000}[i%8]
		k := rng.IntN(40)
		if i%13 == 0 {
			k = int(min(n, 3000)) // many changes: every level, histograms
		}
		gone, moved := randomChanges(rng, n, k)
		origin := int64(-1)
		if i%5 == 4 {
			origin = rng.Int64N(n) - 1
		}
		f := newFakeShard(n, gone, moved)
		cp := f.cp()
		for _, mode := range []struct{ noPoints, fbf bool }{{false, false}, {false, true}, {true, false}} {
			noPoints, fbf := mode.noPoints, mode.fbf
			name := fmt.Sprintf("n=%d k=%d origin=%d noPoints=%v filterByFilter=%v", n, k, origin, noPoints, fbf)
			d := newDescent(f, Shard{Origin: origin, Checkpoint: cp, NoSeqNoPoints: noPoints}, "", f.feedCounts(origin), fbf, int64(len(gone)))
			d.histogramOnly = noPoints // the descent whatever its cost
			c0, h0 := f.counts, f.histograms
			differ, sum, requests, err := d.run(context.Background())
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			wantDiffer, wantSum := f.want(origin, cp)
			if !slices.Equal(differ, wantDiffer) || sum != wantSum {
				t.Fatalf("%s: differ %v (%d live), want %v (%d)", name, differ, sum, wantDiffer, wantSum)
			}
			if got := f.counts - c0 + f.histograms - h0; got != requests {
				t.Fatalf("%s: reported %d requests, made %d", name, requests, got)
			}
			if noPoints && f.counts != c0 {
				t.Fatalf("%s: %d range counts without points, want histograms only", name, f.counts-c0)
			}
		}
	}
}

// TestDescent_Cost: one delete in shards of 100,000 to 10,000,000
// documents is localized with one request per level of Fanout, on both
// kinds of engine. k deletes take, where the engine counts filter by
// filter (Elasticsearch), one request per level and 1,024 nodes; on
// OpenSearch one per node split (maxCountParents a level), past that the
// histograms. By OpenSearch's cost model (fakeShard.cost) the descent never
// costs much more there than the histogram over the whole shard it
// replaces, and less for one delete; that cost still grows with N (the
// first level counts the whole shard). The table is logged (-v).
func TestDescent_Cost(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 2))
	for _, n := range []int64{100_000, 1_000_000, 10_000_000} {
		for _, k := range []int{1, 3, 10, 100, 1000} {
			gone, _ := randomChanges(rng, n, k)
			w := newFakeShard(n, gone, nil)
			counts := w.feedCounts(-1)
			whole := newDescent(w, Shard{Origin: -1, Checkpoint: w.cp(), NoSeqNoPoints: true}, "", counts, false, -1)
			if _, _, _, err := whole.run(context.Background()); err != nil {
				t.Fatal(err)
			}
			levels := 1
			for width := int64(Fanout); width < int64(len(counts)); width *= Fanout {
				levels++
			}
			for _, fbf := range []bool{true, false} {
				f := newFakeShard(n, gone, nil)
				differ, _, requests, err := newDescent(f, Shard{Origin: -1, Checkpoint: f.cp()}, "", counts, fbf, int64(k)).run(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if want, _ := f.want(-1, f.cp()); !slices.Equal(differ, want) {
					t.Fatalf("n=%d k=%d: differ %v, want %v", n, k, differ, want)
				}
				ratio := f.cost / w.cost
				t.Logf("n=%-10d k=%-5d filterByFilter=%-5v descent: %2d requests (%d counts of %d ranges, %d histograms), OpenSearch model %6.0f ms; whole-shard histogram: %2d requests, %6.0f ms; ratio %.2f",
					n, k, fbf, requests, f.counts, f.spans, f.histograms, f.cost/1e6, w.histograms, w.cost/1e6, ratio)
				if k == 1 && requests > levels {
					t.Errorf("n=%d, one delete, filterByFilter %v: %d requests, want at most %d (one per level)", n, fbf, requests, levels)
				}
				if fbf {
					if bound := levels*(k*Fanout/es.MaxCountSpans+1) + w.histograms; requests > bound {
						t.Errorf("n=%d, %d deletes, filter by filter: %d requests, want at most %d", n, k, requests, bound)
					}
					if f.spans > levels*k*Fanout+Fanout {
						t.Errorf("n=%d, %d deletes, filter by filter: %d ranges counted, want at most %d", n, k, f.spans, levels*k*Fanout+Fanout)
					}
					continue
				}
				if bound := levels*min(k, maxCountParents) + w.histograms; requests > bound {
					t.Errorf("n=%d, %d deletes: %d requests, want at most %d", n, k, requests, bound)
				}
				if ratio > 1.3 {
					t.Errorf("n=%d, %d deletes: the descent costs %.2f× the whole-shard histogram, want at most 1.3×", n, k, ratio)
				}
				if k == 1 && n >= 1_000_000 && ratio > 0.85 {
					t.Errorf("n=%d, one delete: the descent costs %.2f× the whole-shard histogram, want at most 0.85×", n, ratio)
				}
			}
		}
	}
}

// TestDescent_MoreLiveThanRecordedAborts: a node where the cluster holds
// more live documents than the feed recorded breaks the invariant: an
// error, not ranges.
func TestDescent_MoreLiveThanRecordedAborts(t *testing.T) {
	for _, n := range []int64{200, 1_000_000} {
		f := newFakeShard(n, nil, nil)
		counts := f.feedCounts(-1)
		counts[(n-1)/K]-- // an entry missing from the last range
		_, _, _, err := newDescent(f, Shard{Origin: -1, Checkpoint: f.cp()}, "", counts, true, 1).run(context.Background())
		var more errMoreLive
		if !errors.As(err, &more) {
			t.Errorf("n=%d: %v, want errMoreLive", n, err)
		}
	}
}
