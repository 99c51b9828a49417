package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// endBatch is how many hashes one pipeline of EndIndex ends, and how many
// legacy fields one HDEL removes.
const endBatch = 1000

// EndIndex drops the fences of an index that ended: call it once its
// index_deleted event was handled (Middleware and the Redis sink do). Each
// hash of the index's fences is replaced, in one script, by a marker
// (field EndedField) that expires after Config.EndGrace: until then every
// event of the index is refused (ShouldApply false, ApplyRedis not
// applied, Record a no-op), so the events still in flight cannot put
// fences back; after it nothing of the index is left. With SlotOf only the
// slots that held fences of the index get a marker. The index's fields
// are removed from the legacy hash (or from Config.Key's hash) with HSCAN
// and HDEL, a pass over that whole hash; that hash gets no marker, so with
// Config.Key only the process that ran EndIndex refuses the index's late
// events (for the grace).
//
// The package doc says why ending is safe. EndIndex is idempotent: a
// redelivered index_deleted event ends the index again and renews the
// markers. It needs the Redis commands UNLINK and PEXPIRE (in a script),
// and HSCAN and HDEL for a legacy hash. An empty uuid is a permanent
// error.
func (f *Fence) EndIndex(ctx context.Context, uuid string) error {
	if uuid == "" {
		return redisx.Permanent(errors.New("end the fences of an index: the index uuid is empty"))
	}
	// First in this process, so that its lanes refuse the index's events
	// from now on without asking Redis.
	f.ended.Store(uuid, time.Now())
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	grace := strconv.FormatInt(f.grace.Milliseconds(), 10)
	markAll := "1"
	if f.slotOf != nil {
		markAll = "0" // 16,384 markers per index would outweigh a small index's fences
	}
	keys := f.indexKeys(uuid)
	for len(keys) > 0 {
		n := min(len(keys), endBatch)
		if err := f.endKeys(ctx, keys[:n], now, grace, markAll); err != nil {
			return fmt.Errorf("end the fences of index %s: %w", uuid, err)
		}
		keys = keys[n:]
	}
	legacy := f.legacy
	if f.single != "" {
		legacy = f.single
	}
	if legacy == "" {
		return nil
	}
	if err := f.dropLegacy(ctx, legacy, uuid); err != nil {
		return fmt.Errorf("end the fences of index %s in %s: %w", uuid, legacy, err)
	}
	return nil
}

// endKeys runs endScript on each key in one pipeline (EVALSHA; the keys
// whose node lacks the script again with EVAL).
func (f *Fence) endKeys(ctx context.Context, keys []string, args ...any) error {
	run := func(keys []string, eval bool) ([]string, error) {
		pipe := f.client.Pipeline()
		cmds := make([]*redis.Cmd, len(keys))
		for i, k := range keys {
			if eval {
				cmds[i] = endScript.Eval(ctx, pipe, []string{k}, args...)
			} else {
				cmds[i] = endScript.EvalSha(ctx, pipe, []string{k}, args...)
			}
		}
		_, _ = pipe.Exec(ctx) // errors are the commands'
		var again []string
		for i, c := range cmds {
			switch err := c.Err(); {
			case err == nil:
			case !eval && redis.HasErrorPrefix(err, "NOSCRIPT"):
				again = append(again, keys[i])
			default:
				return nil, fmt.Errorf("end %s: %w", keys[i], err)
			}
		}
		return again, nil
	}
	again, err := run(keys, false)
	if err == nil && len(again) > 0 {
		_, err = run(again, true)
	}
	return err
}

// dropLegacy removes the fields "<uuid>/…" from a single hash.
func (f *Fence) dropLegacy(ctx context.Context, key, uuid string) error {
	match := globEscape(uuid) + "/*"
	var cursor uint64
	for {
		kv, next, err := f.client.HScan(ctx, key, cursor, match, endBatch).Result()
		if err != nil {
			return err
		}
		if len(kv) > 0 {
			fields := make([]string, 0, len(kv)/2)
			for i := 0; i+1 < len(kv); i += 2 {
				fields = append(fields, kv[i])
			}
			if err := f.client.HDel(ctx, key, fields...).Err(); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// globEscape escapes the glob characters of a Redis MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// HeldDoc is a document whose fence records an upsert as the last event
// applied: the sink holds (or last wrote) it.
type HeldDoc struct {
	Shard int
	ID    string
	SeqNo int64 // of the upsert
}

// Held calls fn with pages of at most pageSize documents whose fences, in
// index uuid's hashes (and its fields of the legacy hash), record an upsert
// as the last event applied, and returns how many it listed. Documents
// whose last event was a delete are left out, as is an index that ended.
// It reads with HSCAN: documents fenced meanwhile may be listed or not.
func (f *Fence) Held(ctx context.Context, uuid string, pageSize int, fn func([]HeldDoc) error) (int64, error) {
	if pageSize <= 0 {
		pageSize = 1000
	}
	var page []HeldDoc
	var n int64
	emit := func(field, value string, legacy bool) error {
		if field == EndedField {
			return nil
		}
		if legacy {
			rest, ok := strings.CutPrefix(field, uuid+"/")
			if !ok {
				return nil
			}
			field = rest
		}
		shard, id, ok := strings.Cut(field, "/")
		if !ok {
			return nil
		}
		sh, err := strconv.Atoi(shard)
		if err != nil {
			return nil
		}
		order, err := strconv.ParseUint(value, 10, 64)
		if err != nil || order%2 == 1 {
			return nil // not an order, or a delete
		}
		page = append(page, HeldDoc{Shard: sh, ID: id, SeqNo: int64(order / 2)})
		n++
		if len(page) >= pageSize {
			err := fn(page)
			page = nil
			return err
		}
		return nil
	}
	scan := func(key, match string, legacy bool) error {
		var cursor uint64
		for {
			kv, next, err := f.client.HScan(ctx, key, cursor, match, endBatch).Result()
			if err != nil {
				return fmt.Errorf("list the fences of index %s in %s: %w", uuid, key, err)
			}
			for i := 0; i+1 < len(kv); i += 2 {
				if err := emit(kv[i], kv[i+1], legacy); err != nil {
					return err
				}
			}
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	keys := f.indexKeys(uuid)
	for start := 0; start < len(keys); start += endBatch {
		// Most of an index's slot hashes are empty: ask which exist first.
		chunk := keys[start:min(start+endBatch, len(keys))]
		pipe := f.client.Pipeline()
		exists := make([]*redis.IntCmd, len(chunk))
		for i, k := range chunk {
			exists[i] = pipe.Exists(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return n, fmt.Errorf("list the fences of index %s: %w", uuid, err)
		}
		for i, k := range chunk {
			if exists[i].Val() == 0 {
				continue
			}
			if err := scan(k, "", false); err != nil {
				return n, err
			}
		}
	}
	legacy := f.legacy
	if f.single != "" {
		legacy = f.single
	}
	if legacy != "" {
		if err := scan(legacy, globEscape(uuid)+"/*", true); err != nil {
			return n, err
		}
	}
	if len(page) > 0 {
		if err := fn(page); err != nil {
			return n, err
		}
	}
	return n, nil
}
