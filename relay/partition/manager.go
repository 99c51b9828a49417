package partition

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// Worker is what a Manager runs for a partition it holds.
type Worker struct {
	// Lease is the partition's lease (key redisx.PartitionKeys(feed, p,
	// P).Lease()). The Manager takes it with TryAcquire before Run.
	Lease *redisx.Lease
	// Run follows the partition while the lease is held. It is called
	// once per acquisition of the lease, so it must be callable again
	// after it returned: a relay.Relay is run once, so Run builds a fresh
	// one (with ReturnOnLostLease) each time, as relay.Feed does. It
	// returns nil when ctx ends (having
	// released the lease), an error wrapping redisx.ErrLeaseLost when the
	// lease is lost, and any other error to stop the Manager.
	Run func(ctx context.Context) error
}

// Config configures a Manager.
type Config struct {
	// Client is the feed's Redis. Required.
	Client redis.UniversalClient
	// Feed is the feed name. Required.
	Feed string
	// Partitions is the feed's partition count, 2..1024. Required.
	Partitions int
	// TTL is the lease TTL, and the time a relay stays a member after its
	// last heartbeat (every TTL/3). Default redisx.DefaultLeaseTTL.
	TTL time.Duration
	// Owner names this process in the relays ZSET (a random suffix makes
	// it unique). Default "relay".
	Owner string
	// Open returns partition p's Worker. It is called once per partition,
	// the first time the Manager wants it; the Worker (its Lease, and its
	// Run called again) serves every later acquisition. Required.
	Open func(p int) (Worker, error)
	// Logger receives the manager's logs. Default slog.Default().
	Logger *slog.Logger
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("partition manager config: Client is nil")
	case c.Feed == "":
		return errors.New("partition manager config: Feed is empty")
	case c.Partitions < 2 || c.Partitions > redisx.MaxPartitions:
		return fmt.Errorf("partition manager config: Partitions = %d: want 2..%d", c.Partitions, redisx.MaxPartitions)
	case c.TTL < 0:
		return fmt.Errorf("partition manager config: TTL = %s: want > 0", c.TTL)
	case c.Open == nil:
		return errors.New("partition manager config: Open is nil")
	}
	return nil
}

// Manager holds a balanced share of a feed's partitions and runs a Worker
// for each. Run it once.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	token string
	key   string // the relays ZSET

	mu      sync.Mutex
	workers map[int]Worker
	running map[int]*running
	members int
}

type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done closes
}

// New returns a Manager.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.TTL == 0 {
		cfg.TTL = redisx.DefaultLeaseTTL
	}
	if cfg.Owner == "" {
		cfg.Owner = "relay"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	return &Manager{cfg: cfg, log: cfg.Logger, token: cfg.Owner + "/" + hex.EncodeToString(b[:]),
		key: redisx.NewKeys(cfg.Feed).Relays(), workers: map[int]Worker{}, running: map[int]*running{}}, nil
}

// Token is this manager's member in the relays ZSET.
func (m *Manager) Token() string { return m.token }

// Held returns the partitions this manager runs now, in order.
func (m *Manager) Held() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int, 0, len(m.running))
	for p := range m.running {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// Members is the number of live relays at the last heartbeat.
func (m *Manager) Members() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.members
}

// Run heartbeats and balances every TTL/3 until ctx ends (then it stops
// every worker, which release their leases, leaves the ZSET and returns
// nil) or a worker fails with an error other than a lost lease (then it
// stops the others and returns that error). Redis errors are logged and
// retried: a manager that cannot reach Redis loses its leases with its
// workers.
func (m *Manager) Run(ctx context.Context) error {
	defer m.stopAll()
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = m.cfg.Client.ZRem(rctx, m.key, m.token).Err()
		cancel()
	}()
	tick := time.NewTicker(m.cfg.TTL / 3)
	defer tick.Stop()
	said := ""
	// The first heartbeat only registers: relays started together see each
	// other at the next one and split the partitions from the start,
	// instead of the first taking them all and giving them back.
	first := true
	for {
		if err := m.reap(); err != nil {
			return err
		}
		err := m.step(ctx, !first)
		if err == nil {
			first = false
		}
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil && err.Error() != said:
			said = err.Error()
			m.log.Warn("partition balancing failed; retrying", logkey.Error, said, logkey.RetryIn, (m.cfg.TTL / 3).String())
		case err == nil && said != "":
			said = ""
			m.log.Info("partition balancing recovered")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// reap forgets workers that stopped; a worker's error other than a lost
// lease is returned.
func (m *Manager) reap() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, r := range m.running {
		select {
		case <-r.done:
		default:
			continue
		}
		delete(m.running, p)
		switch {
		case r.err == nil:
		case errors.Is(r.err, redisx.ErrLeaseLost):
			m.log.Warn("lost the lease of a partition", logkey.Partition, p, logkey.Error, r.err.Error())
		default:
			return fmt.Errorf("partition %d: %w", p, r.err)
		}
	}
	return nil
}

// step heartbeats, reads the live members and, if balance, acts on
// Balance's plan.
func (m *Manager) step(ctx context.Context, balance bool) error {
	now := time.Now()
	pipe := m.cfg.Client.TxPipeline()
	pipe.ZAdd(ctx, m.key, redis.Z{Score: float64(now.Add(m.cfg.TTL).UnixMilli()), Member: m.token})
	pipe.ZRemRangeByScore(ctx, m.key, "-inf", "("+strconv.FormatInt(now.UnixMilli(), 10))
	members := pipe.ZRange(ctx, m.key, 0, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("heartbeat in %s: %w", m.key, err)
	}
	live := members.Val()
	sort.Strings(live)
	self := sort.SearchStrings(live, m.token)
	plan := Balance(m.cfg.Partitions, len(live), self, m.Held())
	m.mu.Lock()
	if m.members != len(live) {
		m.log.Info("relays of the feed", logkey.Relays, len(live), logkey.Partitions, m.cfg.Partitions, logkey.Limit, plan.Limit)
	}
	m.members = len(live)
	m.mu.Unlock()
	if !balance {
		return nil
	}
	for _, p := range plan.Release {
		m.log.Info("giving a partition back for another relay to take", logkey.Partition, p, logkey.Limit, plan.Limit)
		m.stop(p)
	}
	held := len(m.Held())
	for _, p := range plan.Try {
		if held >= plan.Limit || ctx.Err() != nil {
			break
		}
		w, err := m.worker(p)
		if err != nil {
			return err
		}
		ok, err := w.Lease.TryAcquire(ctx)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		m.start(ctx, p, w)
		held++
	}
	return nil
}

func (m *Manager) worker(p int) (Worker, error) {
	m.mu.Lock()
	w, ok := m.workers[p]
	m.mu.Unlock()
	if ok {
		return w, nil
	}
	w, err := m.cfg.Open(p)
	if err != nil {
		return w, fmt.Errorf("partition %d: %w", p, err)
	}
	if w.Lease == nil || w.Run == nil {
		return w, fmt.Errorf("partition %d: Open returned a Worker without Lease or Run", p)
	}
	m.mu.Lock()
	m.workers[p] = w
	m.mu.Unlock()
	return w, nil
}

func (m *Manager) start(ctx context.Context, p int, w Worker) {
	wctx, cancel := context.WithCancel(ctx)
	r := &running{cancel: cancel, done: make(chan struct{})}
	m.mu.Lock()
	m.running[p] = r
	m.mu.Unlock()
	m.log.Info("acquired a partition", logkey.Partition, p)
	go func() {
		defer close(r.done)
		r.err = w.Run(wctx)
	}()
}

// stop cancels partition p's worker and waits for it (it releases the
// lease).
func (m *Manager) stop(p int) {
	m.mu.Lock()
	r := m.running[p]
	delete(m.running, p)
	m.mu.Unlock()
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
}

func (m *Manager) stopAll() {
	for _, p := range m.Held() {
		m.stop(p)
	}
}
