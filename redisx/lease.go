package redisx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultLeaseTTL is the lease TTL when LeaseConfig.TTL is zero.
const DefaultLeaseTTL = 10 * time.Second

// ErrLeaseLost means another owner holds the lease (or it expired): the
// holder must stop writing.
var ErrLeaseLost = errors.New("lease lost (another relay owns the feed, or it expired while Redis was unreachable)")

// LeaseConfig configures a Lease.
type LeaseConfig struct {
	// Client is the Redis client. Required.
	Client redis.UniversalClient
	// Key is the lease key (Keys.Lease). Required.
	Key string
	// TTL is how long the lease lives without renewal. Default 10s. The owner
	// renews it every TTL/3; a standby polls every TTL/3, so it takes over
	// within TTL + TTL/3 after the owner dies.
	TTL time.Duration
	// Owner is a readable owner name stored with the token (host-pid).
	Owner string
}

// Validate names the first bad field.
func (c LeaseConfig) Validate() error {
	if c.Client == nil {
		return errors.New("lease config: Client is nil")
	}
	if c.Key == "" {
		return errors.New("lease config: Key is empty")
	}
	if c.TTL < 0 || (c.TTL > 0 && c.TTL < 30*time.Millisecond) {
		return fmt.Errorf("lease config: TTL = %s: want at least 30ms", c.TTL)
	}
	return nil
}

// Lease is a Redis lease (SET NX PX with a random token) that fences writers:
// checkpoint commits WATCH its key and check the token. Acquire blocks while
// another owner holds it; Keep renews it until the context ends or it is
// lost; Release deletes it if still ours.
type Lease struct {
	cfg   LeaseConfig
	token string

	mu   sync.Mutex
	held bool
	lost chan struct{}
}

// Renew extends the lease only if the token is still ours.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)

// Release deletes the lease only if the token is still ours.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// NewLease returns an unacquired lease with a fresh random token.
func NewLease(cfg LeaseConfig) (*Lease, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultLeaseTTL
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	tok := hex.EncodeToString(b[:])
	if cfg.Owner != "" {
		tok = cfg.Owner + "/" + tok
	}
	return &Lease{cfg: cfg, token: tok, lost: make(chan struct{})}, nil
}

// Token is the value this lease writes to its key.
func (l *Lease) Token() string { return l.token }

// Key is the lease key.
func (l *Lease) Key() string { return l.cfg.Key }

// TTL is the lease time to live.
func (l *Lease) TTL() time.Duration { return l.cfg.TTL }

// TryAcquire takes the lease if nobody holds it (or we already do).
func (l *Lease) TryAcquire(ctx context.Context) (bool, error) {
	ok, err := l.cfg.Client.SetNX(ctx, l.cfg.Key, l.token, l.cfg.TTL).Result()
	if err != nil {
		return false, fmt.Errorf("acquire lease %s: %w", l.cfg.Key, err)
	}
	if !ok {
		cur, err := l.cfg.Client.Get(ctx, l.cfg.Key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("read lease %s: %w", l.cfg.Key, err)
		}
		ok = cur == l.token
	}
	if ok {
		l.mu.Lock()
		if !l.held {
			select {
			case <-l.lost: // lost before: a fresh channel for this tenure
				l.lost = make(chan struct{})
			default:
			}
		}
		l.held = true
		l.mu.Unlock()
	}
	return ok, nil
}

// Holder returns the current owner token of the lease ("" when free).
func (l *Lease) Holder(ctx context.Context) (string, error) {
	cur, err := l.cfg.Client.Get(ctx, l.cfg.Key).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return cur, err
}

// Acquire blocks until the lease is ours, polling every TTL/3. onWait, if not
// nil, is called once with the current holder when we start waiting as a
// standby. Redis errors are returned (the caller retries).
func (l *Lease) Acquire(ctx context.Context, onWait func(holder string)) error {
	waiting := false
	t := time.NewTicker(l.cfg.TTL / 3)
	defer t.Stop()
	for {
		ok, err := l.TryAcquire(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if !waiting && onWait != nil {
			h, _ := l.Holder(ctx)
			onWait(h)
		}
		waiting = true
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Keep renews the lease every TTL/3 until ctx ends (returns nil) or the lease
// is lost: another token is in the key, or renewals failed for a whole TTL
// (returns ErrLeaseLost and closes Lost()).
func (l *Lease) Keep(ctx context.Context) error {
	t := time.NewTicker(l.cfg.TTL / 3)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := renewScript.Run(ctx, l.cfg.Client, []string{l.cfg.Key}, l.token, l.cfg.TTL.Milliseconds()).Int64()
		switch {
		case err == nil && n == 1:
			lastOK = time.Now()
			continue
		case err == nil:
			l.markLost()
			return ErrLeaseLost
		case ctx.Err() != nil:
			return nil
		case time.Since(lastOK) >= l.cfg.TTL:
			l.markLost()
			return fmt.Errorf("%w: renewals failed for %s: %v", ErrLeaseLost, l.cfg.TTL, err)
		}
	}
}

func (l *Lease) markLost() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held {
		l.held = false
		close(l.lost)
	}
}

// Lost is closed when Keep finds the lease lost. Each tenure (from an
// acquisition to a loss) has its own channel: call Lost after acquiring.
func (l *Lease) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// Release deletes the lease if it is still ours, so a standby can take over
// at once.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	l.held = false
	l.mu.Unlock()
	if err := releaseScript.Run(ctx, l.cfg.Client, []string{l.cfg.Key}, l.token).Err(); err != nil {
		return fmt.Errorf("release lease %s: %w", l.cfg.Key, err)
	}
	return nil
}
