package deletes

import (
	"context"
	"fmt"
	"slices"

	"github.com/es-changefeed/es-changefeed/es"
)

// Fanout is the branching of the descent: a node of the hierarchy of
// ranges is split into Fanout children, each counted in the same request.
// Measured on OpenSearch 2.19.6 (docs/PERFORMANCE.md), whose filters
// aggregation tests every filter on every document the query matches, a
// level costs about (documents of the nodes split) × (a constant + Fanout):
// 8 was the cheapest descent to one delete in 1,000,000 documents (2: 61–101
// ms, 4: 47–64, 8: 47–54, 16: 51–65, 64: 97–111 ms; the whole-shard
// histogram 71–124 ms). A shard of 10,000,000 documents (156,250 ranges)
// is then three levels of counts and one histogram deep.
const Fanout = 8

// maxCountParents is the most nodes a level splits and counts on an
// engine that tests each document on every filter (not
// es.Info.CountsFilterByFilter: OpenSearch), one request of range counts
// per node (its Fanout children, under a query
// matching that node alone); a level with more counts its nodes range by
// range with histograms instead. On OpenSearch 2, a request of C range
// counts costs about (documents matched) × (25 + 6·C) ns and a histogram
// at interval K (documents matched) × 70–120 ns (measured,
// docs/PERFORMANCE.md): splitting a node costs about what a histogram over
// it does, and is worth it only for what it prunes, which is little once
// many nodes differ. Counting several nodes' children in one request
// would cost more than either (each document is tested on every filter).
const maxCountParents = Fanout

// maxNodeByNodeMissing is the most documents the feed may count that the
// cluster does not (deletes and moved entries since the last scan) for a
// descent on an engine that tests each document on every filter; with
// more, the histogram over the whole shard costs less (by the cost model
// of maxCountParents, TestDescent_Cost: 0.8× the histogram for one
// change, about 1.0× for two or three, up to 2.4× for more).
const maxNodeByNodeMissing = 2

// maxFilterByFilterMissing is the same bound where the engine counts
// filter by filter. Measured on Elasticsearch 9.5.3 at 1,000,000
// documents (BenchmarkLocalize, docs/PERFORMANCE.md): one delete
// 0.18–0.31× the whole histogram, 100 deletes 1.2–4× (each of the ~900
// ranges counted costs about a millisecond).
const maxFilterByFilterMissing = 8

// histogramSmall: nodes that cover at most this many ranges together are
// counted range by range with one histogram at interval K (a doc-values
// pass over at most 65,536 seq nos, about the cost of one request of
// counts) rather than descended further.
const histogramSmall = 1024

// seqCounter is the cluster side of a descent, as es.Client answers it:
// each call is one request.
type seqCounter interface {
	SeqNoCounts(ctx context.Context, index string, shard int, node string, spans []es.SeqSpan) ([]int64, error)
	SeqNoHistogram(ctx context.Context, index string, shard int, node string, spans []es.SeqSpan, interval int64) (map[int64]int64, error)
}

// errMoreLive: a node holds more live documents than the feed recorded
// there, which the invariant forbids (DESIGN §3): the view is older than
// what was delivered, or there is a bug. The scan aborts.
type errMoreLive struct {
	lo, hi        int64 // ranges [lo, hi)
	live, entries int64
}

func (e errMoreLive) Error() string {
	return fmt.Sprintf("seq nos %d..%d hold %d live documents but the feed recorded %d there", e.lo*K, e.hi*K-1, e.live, e.entries)
}

// descent finds the ranges of one shard whose live documents in
// (origin, cp] differ from the feed's counts (DESIGN §3, "Ranges"). The
// invariant makes the feed's count of any union of ranges at least the
// cluster's, and equal only if they are equal range by range: so a node
// (a run of ranges) whose two counts agree holds no change, and only the
// nodes that differ are split and counted again, level by level, down to
// single ranges. With d changes the descent asks about d·Fanout nodes per
// level, one request per level (per es.MaxCountSpans nodes), over
// log_Fanout(ranges) levels.
type descent struct {
	c      seqCounter
	index  string
	shard  int
	node   string
	origin int64
	cp     int64
	// keys are the feed's ranges, sorted; prefix[i] is the sum of the
	// counts of keys[:i].
	keys   []int64
	prefix []int64
	counts map[int64]int64
	// histogramOnly counts every range with histograms at interval K (an
	// index without points on _seq_no: a range count would scan the
	// shard's doc values for each node).
	histogramOnly bool
	// nodeByNode: the engine tests each document on every filter
	// (es.Info.CountsFilterByFilter false): each node is split in a request
	// of its own, and a level of more than maxCountParents nodes is counted
	// with histograms. Otherwise one request counts a whole level.
	nodeByNode bool
}

// node is the ranges [lo, hi).
type node struct{ lo, hi int64 }

// newDescent is the descent of sh's ranges against the feed's counts, on
// an engine that counts filter by filter or not (es.Info), with missing
// the feed's total less the cluster's count of the shard (-1: unknown).
func newDescent(c seqCounter, sh Shard, node string, counts map[int64]int64, filterByFilter bool, missing int64) *descent {
	d := &descent{c: c, index: sh.Index, shard: sh.Shard, node: node, origin: sh.Origin, cp: sh.Checkpoint,
		counts: counts, histogramOnly: sh.NoSeqNoPoints, nodeByNode: !filterByFilter}
	for r := range counts {
		d.keys = append(d.keys, r)
	}
	slices.Sort(d.keys)
	d.prefix = make([]int64, len(d.keys)+1)
	for i, r := range d.keys {
		d.prefix[i+1] = d.prefix[i] + counts[r]
	}
	limit := int64(maxFilterByFilterMissing)
	if d.nodeByNode {
		limit = maxNodeByNodeMissing
	}
	if u := d.universe(); missing < 0 || missing > limit || u.hi-u.lo <= es.MaxHistogramBuckets {
		// The descent pays only for a few changes in a shard that the
		// histogram does not count in one request.
		d.histogramOnly = true
	}
	return d
}

// feed is the feed's count of the ranges of n.
func (d *descent) feed(n node) int64 {
	i, _ := slices.BinarySearch(d.keys, n.lo)
	j, _ := slices.BinarySearch(d.keys, n.hi)
	return d.prefix[j] - d.prefix[i]
}

// span is the seq nos of n that the cluster is asked about: those in
// (origin, cp]; ok is false when there are none (the cluster then holds 0).
func (d *descent) span(n node) (es.SeqSpan, bool) {
	s := es.SeqSpan{After: max(n.lo*K-1, d.origin), UpTo: min(n.hi*K-1, d.cp)}
	return s, s.UpTo > s.After
}

// universe is the node of every range that holds seq nos of (origin, cp]
// or entries of the feed.
func (d *descent) universe() node {
	lo, hi := max(d.origin+1, 0)/K, d.cp/K+1
	if d.cp <= d.origin {
		lo, hi = 0, 0
	}
	if len(d.keys) > 0 {
		if hi <= lo {
			lo, hi = d.keys[0], d.keys[0]+1
		}
		lo, hi = min(lo, d.keys[0]), max(hi, d.keys[len(d.keys)-1]+1)
	}
	return n(lo, hi)
}

func n(lo, hi int64) node { return node{lo, hi} }

// childrenOf splits p into nodes of cw ranges (the last may be shorter).
func childrenOf(p node, cw int64) []node {
	var out []node
	for lo := p.lo; lo < p.hi; lo += cw {
		out = append(out, n(lo, min(lo+cw, p.hi)))
	}
	return out
}

// run returns the ranges that differ (sorted), the cluster's count of the
// whole universe as its first level saw it, and the requests it made.
func (d *descent) run(ctx context.Context) (differ []int64, sum int64, requests int, err error) {
	u := d.universe()
	if u.hi <= u.lo {
		return nil, 0, 0, nil
	}
	width := int64(1)
	for width < u.hi-u.lo {
		width *= Fanout
	}
	nodes := []node{u}
	first := true
	for len(nodes) > 0 {
		cw := max(width/Fanout, 1)
		var children []node
		covered := int64(0)
		for _, p := range nodes {
			covered += p.hi - p.lo
			children = append(children, childrenOf(p, cw)...)
		}
		if d.histogramOnly || covered <= histogramSmall || (d.nodeByNode && len(nodes) > maxCountParents) {
			// Count the nodes range by range at once.
			cl := map[int64]int64{}
			for _, batch := range d.histogramBatches(nodes) {
				h, err := d.c.SeqNoHistogram(ctx, d.index, d.shard, d.node, batch, K)
				requests++
				if err != nil {
					return nil, 0, requests, err
				}
				for key, c := range h {
					cl[key/K] += c
				}
			}
			for r, c := range cl {
				if f := d.counts[r]; c > f {
					return nil, 0, requests, errMoreLive{r, r + 1, c, f}
				}
				if first {
					sum += c
				}
			}
			for _, p := range nodes {
				differ = d.compareRanges(p, cl, differ)
			}
			break
		}
		// The children, in order: a request per node split, or the whole
		// level at once.
		groups := [][]node{children}
		if d.nodeByNode {
			groups = groups[:0]
			for _, p := range nodes {
				groups = append(groups, childrenOf(p, cw))
			}
		}
		var cl []int64
		for _, g := range groups {
			c, reqs, err := d.countNodes(ctx, g)
			requests += reqs
			if err != nil {
				return nil, 0, requests, err
			}
			cl = append(cl, c...)
		}
		nodes = nodes[:0:0]
		for i, c := range children {
			if first {
				sum += cl[i]
			}
			f := d.feed(c)
			if cl[i] > f {
				return nil, 0, requests, errMoreLive{c.lo, c.hi, cl[i], f}
			}
			if cl[i] == f {
				continue
			}
			if cw == 1 {
				differ = append(differ, c.lo)
			} else {
				nodes = append(nodes, c)
			}
		}
		width, first = cw, false
	}
	slices.Sort(differ)
	return differ, sum, requests, nil
}

// compareRanges appends to differ the ranges of p whose cluster count (cl,
// by range, never above the feed's) is not the feed's.
func (d *descent) compareRanges(p node, cl map[int64]int64, differ []int64) []int64 {
	i, _ := slices.BinarySearch(d.keys, p.lo)
	for ; i < len(d.keys) && d.keys[i] < p.hi; i++ {
		if r := d.keys[i]; cl[r] != d.counts[r] {
			differ = append(differ, r)
		}
	}
	return differ
}

// countNodes asks the cluster's count of each node (0 without asking for
// a node with no seq no in (origin, cp]), es.MaxCountSpans nodes a
// request.
func (d *descent) countNodes(ctx context.Context, nodes []node) ([]int64, int, error) {
	out := make([]int64, len(nodes))
	var spans []es.SeqSpan
	var at []int
	requests := 0
	flush := func() error {
		if len(spans) == 0 {
			return nil
		}
		c, err := d.c.SeqNoCounts(ctx, d.index, d.shard, d.node, spans)
		requests++
		if err != nil {
			return err
		}
		for j, i := range at {
			out[i] = c[j]
		}
		spans, at = spans[:0], at[:0]
		return nil
	}
	for i, p := range nodes {
		s, ok := d.span(p)
		if !ok {
			continue
		}
		spans, at = append(spans, s), append(at, i)
		if len(spans) == es.MaxCountSpans {
			if err := flush(); err != nil {
				return nil, requests, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, requests, err
	}
	return out, requests, nil
}

// histogramBatches are the requests of histograms at interval K over the
// seq nos of nodes (sorted, disjoint): adjacent spans joined, at most
// es.MaxHistogramSpans spans and es.MaxHistogramBuckets buckets a request,
// a long span cut at a range's end.
func (d *descent) histogramBatches(nodes []node) [][]es.SeqSpan {
	var spans []es.SeqSpan
	for _, p := range nodes {
		s, ok := d.span(p)
		if !ok {
			continue
		}
		if k := len(spans); k > 0 && spans[k-1].UpTo == s.After {
			spans[k-1].UpTo = s.UpTo
			continue
		}
		spans = append(spans, s)
	}
	return spanBatches(spans, K)
}

// spanBatches splits sorted, disjoint spans into the requests of
// histograms at interval: at most es.MaxHistogramSpans spans and
// es.MaxHistogramBuckets buckets each (counted per span, as
// es.SeqNoHistogram counts them), a long span cut at a bucket's end.
func spanBatches(spans []es.SeqSpan, interval int64) [][]es.SeqSpan {
	var out [][]es.SeqSpan
	var batch []es.SeqSpan
	var buckets int64
	flush := func() {
		if len(batch) > 0 {
			out = append(out, batch)
		}
		batch, buckets = nil, 0
	}
	for _, sp := range spans {
		for sp.UpTo > sp.After {
			if len(batch) == es.MaxHistogramSpans || buckets == es.MaxHistogramBuckets {
				flush()
			}
			first, last := (sp.After+1)/interval, sp.UpTo/interval
			room := es.MaxHistogramBuckets - buckets
			if last-first+1 > room {
				cut := (first+room)*interval - 1 // the end of the last bucket that fits
				batch = append(batch, es.SeqSpan{After: sp.After, UpTo: cut})
				buckets += room
				sp.After = cut
				continue
			}
			batch = append(batch, sp)
			buckets += last - first + 1
			break
		}
	}
	flush()
	return out
}
