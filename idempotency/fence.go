package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// Errors of the package.
var (
	// ErrNotDocument: the event is not about one document (index_deleted,
	// snapshot_*), so it has no order.
	ErrNotDocument = errors.New("event is not about one document")
	// ErrBadSeqNo: a document event with a negative seq_no cannot be
	// ordered. Errors wrapping it are marked redisx.Permanent.
	ErrBadSeqNo = errors.New("seq_no is negative")
	// ErrBadFenceValue: the fence hash holds something that is not an order
	// (another program wrote the field).
	ErrBadFenceValue = errors.New("fence field holds a value that is not an order")
)

// Config configures a Fence.
type Config struct {
	// Client is the Redis client. Required; the caller closes it.
	Client redis.UniversalClient
	// Key is the fence hash, e.g. redisx.NewKeys(feed).Fence("mirror").
	// Required. In Redis Cluster it must share a hash tag with the keys of
	// ApplyRedis effects.
	Key string
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.Client == nil {
		return errors.New("fence config: Client is nil")
	}
	if c.Key == "" {
		return errors.New("fence config: Key is empty: use redisx.NewKeys(feed).Fence(name)")
	}
	return nil
}

// Fence is a per-document fence in one Redis hash. It is safe for
// concurrent use.
type Fence struct {
	client redis.UniversalClient
	key    string
}

// New returns a fence over the hash cfg.Key. It does not touch Redis.
func New(cfg Config) (*Fence, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Fence{client: cfg.Client, key: cfg.Key}, nil
}

// Key is the fence hash.
func (f *Fence) Key() string { return f.key }

// Fenced reports whether the event is about one document (upsert, delete)
// and so has an order.
func Fenced(e redisx.Event) bool { return e.Op == redisx.OpUpsert || e.Op == redisx.OpDelete }

// Identity is the document's field in a fence hash:
// "<index_uuid>/<shard>/<id>". The id comes last, so slashes in it are
// harmless.
func Identity(e redisx.Event) string {
	return e.IndexUUID + "/" + strconv.Itoa(e.Shard) + "/" + e.ID
}

// Order is the place of a document event in its document's history:
// 2*seq_no for an upsert, 2*seq_no+1 for a delete. Every non-negative
// seq_no fits. The error wraps ErrNotDocument for events that are not
// about one document, or ErrBadSeqNo (marked redisx.Permanent) for a
// negative seq_no.
func Order(e redisx.Event) (uint64, error) {
	if !Fenced(e) {
		return 0, fmt.Errorf("order of %s event: %w", e.Op, ErrNotDocument)
	}
	if e.SeqNo < 0 {
		return 0, redisx.Permanent(fmt.Errorf("order of %s %s seq_no %d: %w", e.Op, Identity(e), e.SeqNo, ErrBadSeqNo))
	}
	o := 2 * uint64(e.SeqNo)
	if e.Op == redisx.OpDelete {
		o++
	}
	return o, nil
}

// Recorded returns the order stored for the event's document; ok is false
// when none is.
func (f *Fence) Recorded(ctx context.Context, e redisx.Event) (order uint64, ok bool, err error) {
	field := Identity(e)
	s, err := f.client.HGet(ctx, f.key, field).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read fence %s field %s: %w", f.key, field, err)
	}
	order, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("read fence %s field %s = %q: %w", f.key, field, s, ErrBadFenceValue)
	}
	return order, true, nil
}

// ShouldApply reports whether the event is newer than anything recorded
// for its document: true when nothing was recorded or the stored order is
// lower. Events that are not about one document are always applied. It
// only reads; Record or ApplyRedis write.
func (f *Fence) ShouldApply(ctx context.Context, e redisx.Event) (bool, error) {
	if !Fenced(e) {
		return true, nil
	}
	o, err := Order(e)
	if err != nil {
		return false, err
	}
	cur, ok, err := f.Recorded(ctx, e)
	if err != nil {
		return false, err
	}
	return !ok || o > cur, nil
}

// Record stores the event's order for its document if it is greater than
// the stored one (a Lua compare-and-set: it never lowers the order). Events
// that are not about one document are not recorded.
func (f *Fence) Record(ctx context.Context, e redisx.Event) error {
	if !Fenced(e) {
		return nil
	}
	o, err := Order(e)
	if err != nil {
		return err
	}
	field := Identity(e)
	if err := recordScript.Run(ctx, f.client, []string{f.key}, field, strconv.FormatUint(o, 10)).Err(); err != nil {
		return fmt.Errorf("record %s order %d in fence %s: %w", field, o, f.key, scriptErr(err))
	}
	return nil
}

// Middleware skips events the fence has seen (it returns nil, so the pool
// acknowledges them) and records an event after the wrapped handler
// succeeded. If Record fails the event is retried and the handler sees it
// again: the handler must tolerate a repeat of the same event. See the
// package doc for what it does not prevent across consumers.
func Middleware(f *Fence) redisx.Middleware {
	return func(next redisx.Handler) redisx.Handler {
		return func(ctx context.Context, e redisx.Event) error {
			ok, err := f.ShouldApply(ctx, e)
			if err != nil || !ok {
				return err
			}
			if err := next(ctx, e); err != nil {
				return err
			}
			return f.Record(ctx, e)
		}
	}
}

// scriptErr makes a script's BADFENCE reply wrap ErrBadFenceValue.
func scriptErr(err error) error {
	if redis.HasErrorPrefix(err, "BADFENCE") {
		return fmt.Errorf("%w: %w", ErrBadFenceValue, err)
	}
	return err
}
