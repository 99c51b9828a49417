package checkpoint

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// A shard's delivered documents live in one small hash per range of
// redisx.RangeSize seq nos (redisx.Keys.DeliveredRange), field id → offset
// of the seq no it was delivered at, plus a hash of the ranges' sizes
// (DeliveredCounts). Both are written by one script per shard inside the
// commit's MULTI, so a range's size in the counts hash is always its HLEN.
// The scripts go as EVAL, never EVALSHA: a NOSCRIPT after a Redis restart
// would fail inside EXEC without undoing the XADDs around it.

// recordRanges records the documents of one range per group of
// arguments: ARGV[i] is the range hash's index in KEYS, ARGV[i+1] its
// range number, ARGV[i+2] the count n of its documents, then n pairs of
// field (id) and value. One HSET per range sets them all, and the fields
// it created (HSET's reply) are counted in the counts hash KEYS[1] with one
// HINCRBY: a field that exists (the same document again in the same range:
// an update within it, a page read again) is overwritten and not counted.
// A page of 1,000 sequential seq nos spans about 16 ranges: 32 calls, not
// 2,000 (docs/PERFORMANCE.md).
var recordRanges = redis.NewScript(`
local added = 0
local i = 1
while i <= #ARGV do
  local n = tonumber(ARGV[i+2])
  local a = redis.call('HSET', KEYS[tonumber(ARGV[i])], unpack(ARGV, i+3, i+2+2*n))
  if a > 0 then
    redis.call('HINCRBY', KEYS[1], ARGV[i+1], a)
    added = added + a
  end
  i = i + 3 + 2*n
end
if added > 0 then redis.call('HINCRBY', KEYS[1], 'total', added) end
return added
`)

// removeRanges deletes field ARGV[i+2] of range hash KEYS[ARGV[i]] (range
// number ARGV[i+1]) and uncounts each field that was there; a range that
// becomes empty leaves the counts hash.
var removeRanges = redis.NewScript(`
local removed = 0
for i = 1, #ARGV, 3 do
  if redis.call('HDEL', KEYS[tonumber(ARGV[i])], ARGV[i+2]) == 1 then
    if redis.call('HINCRBY', KEYS[1], ARGV[i+1], -1) <= 0 then
      redis.call('HDEL', KEYS[1], ARGV[i+1])
    end
    removed = removed + 1
  end
end
if removed > 0 then
  if redis.call('HINCRBY', KEYS[1], 'total', -removed) <= 0 then
    redis.call('HDEL', KEYS[1], 'total')
  end
end
return removed
`)

// dropRanges unlinks every range hash (ARGV[1] .. range number) the
// counts hash KEYS[1] lists, and the counts hash. The range keys share the
// counts hash's slot (the feed's hash tag), which Redis Cluster requires of
// keys a script names itself. About 1 µs per range: a second for a shard of
// 100,000,000 documents.
var dropRanges = redis.NewScript(`
for _, r in ipairs(redis.call('HKEYS', KEYS[1])) do
  if r ~= 'total' then redis.call('UNLINK', ARGV[1] .. r) end
end
redis.call('UNLINK', KEYS[1])
return 1
`)

// Range is the range number of a seq no.
func Range(seqNo int64) int64 { return seqNo / redisx.RangeSize }

// rangeScriptArgs builds the keys and arguments of recordRanges (record)
// or removeRanges for one shard's documents.
func rangeScriptArgs(k redisx.Keys, id ShardID, docs []Doc, record bool) ([]string, []any) {
	if record {
		return recordArgs(k, id, docs)
	}
	keys := []string{k.DeliveredCounts(id.IndexUUID, id.Shard)}
	slot := map[int64]int{}
	args := make([]any, 0, 3*len(docs))
	for i := range docs {
		d := &docs[i]
		r := Range(d.SeqNo)
		n, ok := slot[r]
		if !ok {
			keys = append(keys, k.DeliveredRange(id.IndexUUID, id.Shard, r))
			n = len(keys)
			slot[r] = n
		}
		args = append(args, n, r, d.ID)
	}
	return keys, args
}

// recordArgs builds the keys and arguments of recordRanges: the documents
// grouped by range, in the order of each range's first document.
func recordArgs(k redisx.Keys, id ShardID, docs []Doc) ([]string, []any) {
	keys := []string{k.DeliveredCounts(id.IndexUUID, id.Shard)}
	type group struct {
		r    int64
		docs []int
	}
	var groups []group
	at := map[int64]int{}
	for i := range docs {
		r := Range(docs[i].SeqNo)
		g, ok := at[r]
		if !ok {
			g = len(groups)
			at[r] = g
			groups = append(groups, group{r: r})
			keys = append(keys, k.DeliveredRange(id.IndexUUID, id.Shard, r))
		}
		groups[g].docs = append(groups[g].docs, i)
	}
	args := make([]any, 0, 3*len(groups)+2*len(docs))
	for g, gr := range groups {
		args = append(args, g+2, gr.r, len(gr.docs))
		for _, i := range gr.docs {
			args = append(args, docs[i].ID, rangeValue(docs[i].SeqNo, docs[i].Routing))
		}
	}
	return keys, args
}

// rangeValue is a range field's value: the offset, then the routing.
func rangeValue(seqNo int64, routing string) string {
	off := strconv.FormatInt(seqNo-Range(seqNo)*redisx.RangeSize, 10)
	if routing == "" {
		return off
	}
	return off + " " + routing
}

// parseRangeValue reads a range field's value back into a seq no and a
// routing.
func parseRangeValue(r int64, v string) (int64, string, error) {
	off, routing, _ := strings.Cut(v, " ")
	n, err := strconv.ParseInt(off, 10, 64)
	if err != nil || n < 0 || n >= redisx.RangeSize {
		return 0, "", fmt.Errorf("delivered range %d holds %q, want an offset below %d", r, v, redisx.RangeSize)
	}
	return r*redisx.RangeSize + n, routing, nil
}

// RangeCounts returns the sizes of one shard's delivered ranges by range
// number, and their total as the counts hash records it.
func RangeCounts(ctx context.Context, rdb redis.Cmdable, k redisx.Keys, id ShardID) (map[int64]int64, int64, error) {
	key := k.DeliveredCounts(id.IndexUUID, id.Shard)
	out := map[int64]int64{}
	var total int64
	iter := rdb.HScan(ctx, key, 0, "", 10000).Iterator()
	for iter.Next(ctx) {
		f := iter.Val()
		if !iter.Next(ctx) {
			break
		}
		n, err := strconv.ParseInt(iter.Val(), 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("%s field %s = %q: not a count", key, f, iter.Val())
		}
		if f == "total" {
			total = n
			continue
		}
		r, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("%s has field %q: want a range number or total", key, f)
		}
		out[r] = n
	}
	if err := iter.Err(); err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", key, err)
	}
	return out, total, nil
}

// ReadRanges returns the documents recorded in some delivered ranges of a
// shard, checking each range's size against counts (nil: not checked).
func ReadRanges(ctx context.Context, rdb redis.UniversalClient, k redisx.Keys, id ShardID, ranges []int64, counts map[int64]int64) ([]Doc, error) {
	var out []Doc
	var err error
	for start := 0; start < len(ranges); start += 100 {
		chunk := ranges[start:min(start+100, len(ranges))]
		cmds := make([]*redis.MapStringStringCmd, len(chunk))
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, r := range chunk {
				cmds[i] = p.HGetAll(ctx, k.DeliveredRange(id.IndexUUID, id.Shard, r))
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("read delivered ranges of shard %s: %w", id, err)
		}
		for i, r := range chunk {
			if out, err = appendRange(out, k, id, r, cmds[i].Val(), counts); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// appendRange appends the documents of range r's hash fields to out,
// checking its size against counts (nil: not checked).
func appendRange(out []Doc, k redisx.Keys, id ShardID, r int64, fields map[string]string, counts map[int64]int64) ([]Doc, error) {
	if counts != nil && int64(len(fields)) != counts[r] {
		return nil, fmt.Errorf("delivered range %d of shard %s holds %d ids but its count says %d (%s)", r, id, len(fields), counts[r], k.DeliveredCounts(id.IndexUUID, id.Shard))
	}
	for docID, v := range fields {
		seq, routing, err := parseRangeValue(r, v)
		if err != nil {
			return nil, fmt.Errorf("shard %s, id %q: %w", id, docID, err)
		}
		out = append(out, Doc{ID: docID, Routing: routing, SeqNo: seq})
	}
	return out, nil
}

// readShard returns, in one atomic step, the set of the layout before
// ranges (KEYS[2]), the counts hash (KEYS[1]), then each range number the
// counts list with its hash (ARGV[1] .. range number, in the counts hash's
// slot like dropRanges's keys).
var readShard = redis.NewScript(`
local counts = redis.call('HGETALL', KEYS[1])
local out = {redis.call('SMEMBERS', KEYS[2]), counts}
for i = 1, #counts, 2 do
  if counts[i] ~= 'total' then
    out[#out + 1] = counts[i]
    out[#out + 1] = redis.call('HGETALL', ARGV[1] .. counts[i])
  end
end
return out
`)

// ReadDelivered returns every document recorded for a shard, in both
// layouts: the ranges, and the set of feeds not yet migrated (SeqNo -1).
// It reads one state of the shard, in one script, while a relay commits to
// it: read key by key, the counts could list a range a later commit had
// emptied. It reads the whole shard into memory: for tests and small
// shards.
func ReadDelivered(ctx context.Context, rdb redis.UniversalClient, k redisx.Keys, id ShardID) ([]Doc, error) {
	keys := []string{k.DeliveredCounts(id.IndexUUID, id.Shard), k.Delivered(id.IndexUUID, id.Shard)}
	res, err := readShard.Eval(ctx, rdb, keys, k.DeliveredRangePrefix(id.IndexUUID, id.Shard)).Slice()
	if err != nil {
		return nil, fmt.Errorf("read the delivered documents of shard %s: %w", id, err)
	}
	bad := func(what string) error {
		return fmt.Errorf("read the delivered documents of shard %s: the script returned %s", id, what)
	}
	if len(res) < 2 || len(res)%2 != 0 {
		return nil, bad(fmt.Sprintf("%d values", len(res)))
	}
	strs := func(v any) ([]string, bool) {
		a, ok := v.([]any)
		if !ok {
			return nil, false
		}
		out := make([]string, len(a))
		for i := range a {
			if out[i], ok = a[i].(string); !ok {
				return nil, false
			}
		}
		return out, true
	}
	legacy, ok1 := strs(res[0])
	flat, ok2 := strs(res[1])
	if !ok1 || !ok2 || len(flat)%2 != 0 {
		return nil, bad("a malformed set or counts hash")
	}
	counts := map[int64]int64{}
	for i := 0; i < len(flat); i += 2 {
		if flat[i] == "total" {
			continue
		}
		r, err1 := strconv.ParseInt(flat[i], 10, 64)
		n, err2 := strconv.ParseInt(flat[i+1], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s has field %q = %q: want a range number and a count", keys[0], flat[i], flat[i+1])
		}
		counts[r] = n
	}
	var docs []Doc
	for i := 2; i < len(res); i += 2 {
		rs, _ := res[i].(string)
		r, err := strconv.ParseInt(rs, 10, 64)
		kv, ok := strs(res[i+1])
		if err != nil || !ok || len(kv)%2 != 0 {
			return nil, bad(fmt.Sprintf("a malformed range %v", res[i]))
		}
		fields := make(map[string]string, len(kv)/2)
		for j := 0; j < len(kv); j += 2 {
			fields[kv[j]] = kv[j+1]
		}
		if docs, err = appendRange(docs, k, id, r, fields, counts); err != nil {
			return nil, err
		}
	}
	for _, docID := range legacy {
		docs = append(docs, Doc{ID: docID, SeqNo: -1})
	}
	return docs, nil
}
