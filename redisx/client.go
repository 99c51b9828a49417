package redisx

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrBadURL wraps every reason a Redis URL is refused.
var ErrBadURL = errors.New("bad Redis URL")

// NewClient returns a client for a Redis URL: redis://[user:password@]host:port[/db]
// or rediss:// for TLS. The caller closes it. The error names the URL with
// its password masked.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// Not err itself: a *url.Error quotes the whole URL, password included.
		return nil, fmt.Errorf("%w %q: %v (want redis://host:port/db or rediss://…)", ErrBadURL, Redact(rawURL), errors.Unwrap(err))
	}
	switch u.Scheme {
	case "redis", "rediss":
	case "":
		return nil, fmt.Errorf("%w %q: no scheme (want redis://host:port/db or rediss://…)", ErrBadURL, Redact(rawURL))
	default:
		return nil, fmt.Errorf("%w %q: scheme %q is not supported (want redis:// or rediss://)", ErrBadURL, Redact(rawURL), u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w %q: no host (want redis://host:port/db)", ErrBadURL, Redact(rawURL))
	}
	if strayAt(u) {
		return nil, fmt.Errorf("%w %q: an '@' after the host (percent-encode '/', '?' and '#' in a password: %%2F, %%3F, %%23)", ErrBadURL, Redact(rawURL))
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrBadURL, Redact(rawURL), err)
	}
	return redis.NewClient(opt), nil
}

// strayAt reports whether an '@' follows the host: a password with an
// unescaped '/', '?' or '#' ended the host early, and what follows is
// read as path, query or fragment.
func strayAt(u *url.URL) bool {
	return strings.Contains(u.EscapedPath()+u.RawQuery+u.EscapedFragment()+u.Opaque, "@")
}

// Redact masks the password of a URL for logs and errors.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil || strayAt(u) {
		// Unparsable, no "scheme://", or a password with a '/', '?' or
		// '#' that ended the host early: mask everything up to the last '@'.
		if i := strings.LastIndex(rawURL, "@"); i >= 0 {
			start := 0
			if j := strings.Index(rawURL, "://"); j >= 0 && j < i {
				start = j + 3
			}
			return rawURL[:start] + "xxxxx" + rawURL[i:]
		}
		return rawURL
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// Sentinels for errors.Is on Check and CheckKeyTypes errors.
var (
	// ErrNotRedis: the server at the URL does not speak the Redis protocol.
	ErrNotRedis = errors.New("not a Redis server")
	// ErrNoDatabase: the URL names a database number the server does not have.
	ErrNoDatabase = errors.New("no database")
	// ErrWrongType: a feed key holds another type than the feed puts there.
	ErrWrongType = errors.New("feed key of the wrong type")
)

// Check pings the server of rawURL through rdb (a client NewClient made
// from rawURL) and turns a failure into one error naming the URL, password
// masked: unreachable, not a Redis server (ErrNotRedis, with what it
// answered), a database number it does not have (ErrNoDatabase), refused
// credentials. It blocks until the answer or ctx ends.
func Check(ctx context.Context, rdb redis.UniversalClient, rawURL string) error {
	err := rdb.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	where := Redact(rawURL)
	opt, perr := redis.ParseURL(rawURL)
	if perr != nil {
		return fmt.Errorf("%w %q: %v", ErrBadURL, where, perr)
	}
	var rerr redis.Error
	var oe *net.OpError
	var rh tls.RecordHeaderError
	switch {
	case redis.HasErrorPrefix(err, "DB index is out of range"):
		return fmt.Errorf("Redis at %s has %w %d (%v): it has %s",
			where, ErrNoDatabase, opt.DB, err, databases(ctx, opt))
	case redis.HasErrorPrefix(err, "NOAUTH"), redis.HasErrorPrefix(err, "WRONGPASS"), redis.HasErrorPrefix(err, "NOPERM"):
		return fmt.Errorf("Redis at %s refused the credentials: %w", where, err)
	case errors.As(err, &rerr):
		return fmt.Errorf("Redis at %s: %w", where, err)
	case errors.As(err, &rh):
		return fmt.Errorf("%s does not speak TLS (%v): use redis:// instead of rediss://", where, err)
	case errors.As(err, &oe) && oe.Op == "dial":
		return fmt.Errorf("cannot reach Redis at %s: %w", where, err)
	}
	if answer, redisLike := probe(ctx, opt); !redisLike {
		return fmt.Errorf("%s is %w: it %s (PING: %v)", where, ErrNotRedis, answer, err)
	}
	return fmt.Errorf("cannot reach Redis at %s: %w", where, err)
}

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
	case errors.Is(err, io.EOF):
		return "closed the connection without answering PING (for a Redis with TLS, use rediss://)", false
	}
	return "", true // silence: a busy or paused Redis looks the same
}

// databases says how many databases the server has, as well as it can tell.
func databases(ctx context.Context, opt *redis.Options) string {
	o := *opt
	o.DB = 0
	c := redis.NewClient(&o)
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
