package redisx

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/tlsx"
	"github.com/es-changefeed/es-changefeed/internal/urlx"
)

// ErrBadURL wraps every reason a Redis URL is refused.
var ErrBadURL = errors.New("bad Redis URL")

// DefaultURL is the Redis a command uses when none is named.
const DefaultURL = "redis://localhost:6379/0"

// NewClient returns a client for a Redis URL: redis://[user:password@]host:port[/db],
// rediss:// for TLS, or a Sentinel URL (see ClientConfig.URL). The caller
// closes it. The error names the URL with its password masked.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	return NewClientWithConfig(ClientConfig{URL: rawURL})
}

// Redact masks the password of a URL for logs and errors (urlx.Redact).
func Redact(rawURL string) string { return urlx.Redact(rawURL) }

// Sentinels for errors.Is on Check and CheckKeyTypes errors.
var (
	// ErrNotRedis: the server at the URL does not speak the Redis protocol.
	ErrNotRedis = errors.New("not a Redis server")
	// ErrNoDatabase: the URL names a database number the server does not have.
	ErrNoDatabase = errors.New("no database")
	// ErrWrongType: a feed key holds another type than the feed puts there.
	ErrWrongType = errors.New("feed key of the wrong type")
	// ErrNotCluster: a redis-cluster:// URL names a server without
	// cluster support.
	ErrNotCluster = errors.New("not a Redis Cluster")
)

// Check pings the server of cfg through rdb (a client NewClientWithConfig
// made from cfg) and turns a failure into one error naming the URL,
// password masked: unreachable, not a Redis server (ErrNotRedis, with what
// it answered), a database number it does not have (ErrNoDatabase),
// refused credentials (ErrAuth), a TLS failure (a *tlsx.Error: a
// certificate it does not trust, a client certificate the server refused,
// plain text to a rediss:// URL, TLS only behind a redis:// URL), no
// permission for PING (ErrNoPermission). It blocks until the answer or ctx
// ends.
func Check(ctx context.Context, rdb redis.UniversalClient, cfg ClientConfig) error {
	err := rdb.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	where := cfg.Redacted()
	p, perr := cfg.parse()
	if perr != nil {
		return perr
	}
	if p.failover != nil {
		if why := askSentinels(ctx, p.failover); why != "" {
			return fmt.Errorf("Redis at %s: %s (PING: %v)", where, why, err)
		}
	}
	var rerr redis.Error
	var oe *net.OpError
	if te := tlsx.Classify(err, tlsx.Client{Peer: "Redis at " + where, Noun: "the server", HasClientCert: len(cfg.ClientCertPEM) > 0}); te != nil {
		if te.Problem == tlsx.NotTLS {
			te.Detail = "it answers in plain text"
		}
		return te
	}
	switch {
	case p.cluster != nil && redis.HasErrorPrefix(err, "This instance has cluster support disabled"):
		return fmt.Errorf("Redis at %s is %w: a node answered %q: for a single server use redis:// (rediss:// for TLS)", where, ErrNotCluster, err)
	case redis.HasErrorPrefix(err, "DB index is out of range"):
		return fmt.Errorf("Redis at %s has %w %d (%v): it has %s",
			where, ErrNoDatabase, p.db, err, databases(ctx, p))
	case redis.HasErrorPrefix(err, "NOAUTH"), redis.HasErrorPrefix(err, "WRONGPASS"), strings.Contains(err.Error(), "failed to authenticate"):
		return fmt.Errorf("Redis at %s: %w: %v", where, ErrAuth, err)
	case IsNoPerm(err):
		return fmt.Errorf("Redis at %s: %w: %v", where, &PermissionError{Command: "ping", Err: err}, err)
	case errors.As(err, &rerr):
		return fmt.Errorf("Redis at %s: %w", where, err)
	case errors.As(err, &oe) && oe.Op == "dial":
		return fmt.Errorf("cannot reach Redis at %s: %w", where, err)
	}
	if p.failover != nil {
		return fmt.Errorf("cannot reach the Redis master %q through the sentinels of %s: %w", p.failover.MasterName, where, err)
	}
	opt := p.opt
	if p.cluster != nil {
		opt = &redis.Options{Addr: p.cluster.Addrs[0], TLSConfig: p.cluster.TLSConfig}
	}
	if answer, redisLike := probe(ctx, opt); !redisLike {
		if opt.TLSConfig == nil && answer == closedSilently && tlsx.Speaks(ctx, opt.Addr, "") {
			return &tlsx.Error{Peer: "Redis at " + where, Problem: tlsx.Required, Detail: "the server takes TLS only", Err: err}
		}
		return fmt.Errorf("%s is %w: it %s (PING: %v)", where, ErrNotRedis, answer, err)
	}
	return fmt.Errorf("cannot reach Redis at %s: %w", where, err)
}

// closedSilently is probe's answer for a connection closed without a word
// (a TLS-only server does so to plain text).
const closedSilently = "closed the connection without answering PING (for a Redis with TLS, use rediss://)"

// probe sends an inline PING over a fresh connection and reads the first
// line of the answer. A Redis server answers +PONG or an -ERROR; anything
// else (an HTTP status line, a banner, a connection closed at once) is
// described. Silence is not judged: a busy Redis is silent too.
func probe(ctx context.Context, opt *redis.Options) (answer string, redisLike bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", opt.Addr)
	if err != nil {
		return "", true // not a protocol question
	}
	if opt.TLSConfig != nil {
		tc := tls.Client(conn, opt.TLSConfig)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return "", true
		}
		conn = tc
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return "", true
	}
	line, err := bufio.NewReader(io.LimitReader(conn, 200)).ReadString('\n')
	switch {
	case line != "" && (line[0] == '+' || line[0] == '-'):
		return "", true
	case line != "":
		return fmt.Sprintf("answered %q", strings.TrimSpace(line)), false
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return closedSilently, false
	}
	return "", true // silence: a busy or paused Redis looks the same
}

// databases says how many databases the server has, as well as it can tell.
func databases(ctx context.Context, p parsed) string {
	var c *redis.Client
	if p.failover != nil {
		o := *p.failover
		o.DB = 0
		c = redis.NewFailoverClient(&o)
	} else {
		o := *p.opt
		o.DB = 0
		c = redis.NewClient(&o)
	}
	defer c.Close()
	if v, err := c.ConfigGet(ctx, "databases").Result(); err == nil && v["databases"] != "" {
		if n, err := strconv.Atoi(v["databases"]); err == nil {
			return fmt.Sprintf("%d (0..%d, its `databases` setting): use one of those after the / of the URL", n, n-1)
		}
	}
	return "fewer (its `databases` setting, 16 by default: 0..15): use one of those after the / of the URL"
}

// WrongTypeError is a feed key that holds another Redis type than the feed
// puts there: the key is someone else's, or was written by hand.
type WrongTypeError struct {
	Key  string
	Type string // what it holds: "string", "list", ...
	Want string // what the feed puts there
}

func (e *WrongTypeError) Error() string {
	return fmt.Sprintf("key %s is a %s, not a %s", e.Key, e.Type, e.Want)
}

// Is makes errors.Is(err, ErrWrongType) true.
func (e *WrongTypeError) Is(target error) bool { return target == ErrWrongType }

// CheckKeyTypes reads the type of every fixed-name key of the feed (events,
// dead letters, checkpoints, indices, meta, generations, lease) and returns
// a *WrongTypeError for the first that exists with another type than the
// feed's. It writes nothing.
func CheckKeyTypes(ctx context.Context, rdb redis.UniversalClient, keys Keys) error {
	want := []struct{ key, typ string }{
		{keys.Events(), "stream"}, {keys.Dead(), "stream"}, {keys.Checkpoints(), "hash"}, {keys.Indices(), "hash"},
		{keys.Meta(), "hash"}, {keys.Generations(), "hash"}, {keys.Lease(), "string"},
	}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.StatusCmd, len(want))
	for i, w := range want {
		cmds[i] = pipe.Type(ctx, w.key)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("read the types of the keys of feed %s: %w", keys.Feed(), err)
	}
	for i, w := range want {
		if t := cmds[i].Val(); t != "none" && t != w.typ {
			return &WrongTypeError{Key: w.key, Type: t, Want: w.typ}
		}
	}
	return nil
}

// askSentinels asks each sentinel for the master and says what is wrong
// when none names it: unreachable, or no master of that name. "" when
// some sentinel knows the master (the trouble is elsewhere).
func askSentinels(ctx context.Context, fo *redis.FailoverOptions) string {
	var unknown, unreachable []string
	for _, addr := range fo.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, TLSConfig: fo.TLSConfig, MaxRetries: -1})
		_, err := sc.GetMasterAddrByName(ctx, fo.MasterName).Result()
		sc.Close()
		switch {
		case err == nil:
			return ""
		case errors.Is(err, redis.Nil):
			unknown = append(unknown, addr)
		default:
			unreachable = append(unreachable, fmt.Sprintf("%s (%v)", addr, err))
		}
	}
	var parts []string
	if len(unknown) > 0 {
		parts = append(parts, fmt.Sprintf("the sentinels %s know no master named %q: check the master name",
			strings.Join(unknown, ", "), fo.MasterName))
	}
	if len(unreachable) > 0 {
		parts = append(parts, "cannot reach the sentinels "+strings.Join(unreachable, ", "))
	}
	return strings.Join(parts, "; ")
}

// Persistence is how a Redis server keeps what it acknowledged, as
// CONFIG GET reports it.
type Persistence struct {
	AppendOnly  bool   // appendonly yes
	AppendFsync string // always, everysec or no
	Save        string // the RDB snapshot rule ("" : none)
}

// ReadPersistence reads the server's persistence settings (CONFIG GET,
// which managed services and least-privilege users often refuse: the
// error then says so and nothing else is wrong). On Redis Cluster it asks
// one node.
func ReadPersistence(ctx context.Context, rdb redis.UniversalClient) (Persistence, error) {
	m, err := rdb.ConfigGet(ctx, "appendonly").Result()
	if err != nil {
		return Persistence{}, fmt.Errorf("CONFIG GET appendonly: %w", err)
	}
	f, err := rdb.ConfigGet(ctx, "appendfsync").Result()
	if err != nil {
		return Persistence{}, fmt.Errorf("CONFIG GET appendfsync: %w", err)
	}
	s, err := rdb.ConfigGet(ctx, "save").Result()
	if err != nil {
		return Persistence{}, fmt.Errorf("CONFIG GET save: %w", err)
	}
	return Persistence{AppendOnly: m["appendonly"] == "yes", AppendFsync: f["appendfsync"], Save: s["save"]}, nil
}

// Risk says what a Redis with these settings may lose of what it
// acknowledged ("" when nothing short of losing the disk).
func (p Persistence) Risk() string {
	switch {
	case !p.AppendOnly && p.Save == "":
		return "Redis persists nothing (appendonly no, no save rule): a restart loses the feed's state, and the relay then refuses to go on until `es-changefeed resync`"
	case !p.AppendOnly:
		return "Redis persists only RDB snapshots (appendonly no): a restart goes back to the last snapshot, losing every commit since"
	case p.AppendFsync != "always":
		return "Redis fsyncs its append-only file once a second (appendfsync " + p.AppendFsync + "): a power failure, or a kill while an fsync is slow, loses up to about 2 s of commits it acknowledged"
	}
	return ""
}
