package redisx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/urlx"
)

// URL schemes NewClientWithConfig accepts.
const (
	SchemeRedis       = "redis"
	SchemeRedisTLS    = "rediss"
	SchemeSentinel    = "redis-sentinel"
	SchemeSentinelTLS = "rediss-sentinel"
	SchemeCluster     = "redis-cluster"
	SchemeClusterTLS  = "rediss-cluster"
)

// ClientConfig configures a client of the feed's Redis: a server, or a
// master found through Sentinel, over plain TCP or TLS.
type ClientConfig struct {
	// URL is the server. Required. One of
	//
	//	redis://[user:password@]host:port[/db]
	//	rediss://[user:password@]host:port[/db]                          (TLS)
	//	redis-sentinel://[user:password@]host:port[,host:port…]/master[/db]
	//	rediss-sentinel://…                                               (TLS to sentinels and servers)
	//	redis-cluster://[user:password@]host:port[,host:port…]           (Redis Cluster)
	//	rediss-cluster://…                                                (Redis Cluster over TLS)
	//
	// With Redis Cluster, host:port are some of its nodes (the client
	// learns the others from them) and there is no database number but 0.
	// With Sentinel, host:port are the sentinels and the user and password
	// are the data servers' (the sentinels are asked without credentials).
	URL string
	// Password, when not empty, replaces the URL's password (from a flag,
	// the environment or a file, so it stays out of the URL). Default: the
	// URL's.
	Password string
	// SentinelMaster names the master when the URL is redis:// or
	// rediss://: it turns host:port into a sentinel (a redis-sentinel://
	// URL names it in its path instead). Default "": no Sentinel.
	SentinelMaster string
	// CACertPEM holds the PEM certificates of the CAs the server's
	// certificate must chain to (TLS only). Default: the system's roots.
	CACertPEM []byte
	// ClientCertPEM and ClientKeyPEM are a client certificate and its key
	// in PEM, for servers that check clients (tls-auth-clients). Both or
	// neither; TLS only. Default: none.
	ClientCertPEM, ClientKeyPEM []byte
	// InsecureSkipVerify turns off the check of the server's certificate
	// (TLS only; not with CACertPEM). Default false.
	InsecureSkipVerify bool
}

// parsed is a ClientConfig turned into go-redis options: exactly one of
// opt, failover and cluster is set.
type parsed struct {
	opt      *redis.Options
	failover *redis.FailoverOptions
	cluster  *redis.ClusterOptions
	tls      *tls.Config
	db       int
}

// Validate names the first bad field. It reads no file and opens no
// connection.
func (c ClientConfig) Validate() error {
	_, err := c.parse()
	return err
}

// Redacted is the URL with its password masked, for logs and errors.
func (c ClientConfig) Redacted() string { return Redact(c.URL) }

// TLS reports whether the client talks TLS (rediss:// or
// rediss-sentinel://).
func (c ClientConfig) TLS() bool {
	s, _, _ := strings.Cut(c.URL, "://")
	return s == SchemeRedisTLS || s == SchemeSentinelTLS || s == SchemeClusterTLS
}

// Cluster reports whether the URL is a Redis Cluster's (redis-cluster://
// or rediss-cluster://).
func (c ClientConfig) Cluster() bool {
	s, _, _ := strings.Cut(c.URL, "://")
	return s == SchemeCluster || s == SchemeClusterTLS
}

func (c ClientConfig) parse() (parsed, error) {
	where := Redact(c.URL)
	u, err := url.Parse(c.URL)
	if err != nil {
		// Not err itself: a *url.Error quotes the whole URL, password included.
		return parsed{}, fmt.Errorf("%w %q: %v (want redis://host:port/db or rediss://…)", ErrBadURL, where, errors.Unwrap(err))
	}
	var sentinel, secure, cluster bool
	switch u.Scheme {
	case SchemeRedis:
	case SchemeRedisTLS:
		secure = true
	case SchemeSentinel:
		sentinel = true
	case SchemeSentinelTLS:
		sentinel, secure = true, true
	case SchemeCluster:
		cluster = true
	case SchemeClusterTLS:
		cluster, secure = true, true
	case "":
		return parsed{}, fmt.Errorf("%w %q: no scheme (want redis://host:port/db or rediss://…)", ErrBadURL, where)
	default:
		return parsed{}, fmt.Errorf("%w %q: scheme %q is not supported (want redis://, rediss://, redis-sentinel://, rediss-sentinel://, redis-cluster:// or rediss-cluster://)", ErrBadURL, where, u.Scheme)
	}
	if u.Host == "" {
		return parsed{}, fmt.Errorf("%w %q: no host (want %s://host:port/…)", ErrBadURL, where, u.Scheme)
	}
	if urlx.StrayAt(u) {
		return parsed{}, fmt.Errorf("%w %q: an '@' after the host (percent-encode '/', '?' and '#' in a password: %%2F, %%3F, %%23)", ErrBadURL, where)
	}
	if !secure {
		switch {
		case len(c.CACertPEM) > 0:
			return parsed{}, fmt.Errorf("%w %q: a CA certificate is set, but %s:// is not TLS: use the TLS scheme (rediss:// or rediss-sentinel://)", ErrBadURL, where, u.Scheme)
		case len(c.ClientCertPEM) > 0 || len(c.ClientKeyPEM) > 0:
			return parsed{}, fmt.Errorf("%w %q: a client certificate is set, but %s:// is not TLS: use the TLS scheme (rediss:// or rediss-sentinel://)", ErrBadURL, where, u.Scheme)
		case c.InsecureSkipVerify:
			return parsed{}, fmt.Errorf("%w %q: skipping certificate verification is asked for, but %s:// is not TLS", ErrBadURL, where, u.Scheme)
		}
	}
	if c.InsecureSkipVerify && len(c.CACertPEM) > 0 {
		return parsed{}, errors.New("redis client config: CACertPEM and InsecureSkipVerify contradict each other: verify with the CA, or do not verify, not both")
	}
	if (len(c.ClientCertPEM) > 0) != (len(c.ClientKeyPEM) > 0) {
		return parsed{}, errors.New("redis client config: a client certificate needs both ClientCertPEM and ClientKeyPEM")
	}
	var p parsed
	if secure {
		if p.tls, err = c.tlsConfig(); err != nil {
			return parsed{}, err
		}
	}
	if cluster {
		if c.SentinelMaster != "" {
			return parsed{}, fmt.Errorf("%w %q: a Sentinel master is set, but %s:// is a Redis Cluster (it fails over by itself): drop the Sentinel master", ErrBadURL, where, u.Scheme)
		}
		return c.parseCluster(u, p)
	}
	if sentinel && c.SentinelMaster != "" {
		return parsed{}, fmt.Errorf("%w %q: the master is named twice (in the URL and as SentinelMaster): keep one", ErrBadURL, where)
	}
	if sentinel || c.SentinelMaster != "" {
		return c.parseSentinel(u, sentinel, p)
	}
	// A plain URL: go-redis parses host, db and query options.
	opt, err := redis.ParseURL(c.URL)
	if err != nil {
		return parsed{}, fmt.Errorf("%w %q: %v", ErrBadURL, where, err)
	}
	if p.tls != nil {
		// Keep the ServerName go-redis derived from the host.
		p.tls.ServerName = opt.TLSConfig.ServerName
		p.tls.InsecureSkipVerify = p.tls.InsecureSkipVerify || opt.TLSConfig.InsecureSkipVerify
		opt.TLSConfig = p.tls
	}
	if c.Password != "" {
		opt.Password = c.Password
	}
	p.opt, p.db = opt, opt.DB
	return p, nil
}

// parseSentinel reads host:port[,host:port…] as sentinels and the path as
// /master[/db] (inPath) or /db (SentinelMaster set).
func (c ClientConfig) parseSentinel(u *url.URL, inPath bool, p parsed) (parsed, error) {
	where := Redact(c.URL)
	fo := &redis.FailoverOptions{MasterName: c.SentinelMaster, TLSConfig: p.tls}
	for _, hp := range strings.Split(u.Host, ",") {
		h, port, err := net.SplitHostPort(hp)
		if err != nil || h == "" || port == "" {
			return parsed{}, fmt.Errorf("%w %q: sentinel address %q: want host:port (several: host1:26379,host2:26379)", ErrBadURL, where, hp)
		}
		fo.SentinelAddrs = append(fo.SentinelAddrs, hp)
	}
	parts := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
	if inPath {
		if len(parts) == 0 {
			return parsed{}, fmt.Errorf("%w %q: no master name (want %s://host:26379/<master>[/db])", ErrBadURL, where, u.Scheme)
		}
		fo.MasterName, parts = parts[0], parts[1:]
	}
	switch len(parts) {
	case 0:
	case 1:
		db, err := strconv.Atoi(parts[0])
		if err != nil || db < 0 {
			return parsed{}, fmt.Errorf("%w %q: database %q is not a number", ErrBadURL, where, parts[0])
		}
		fo.DB = db
	default:
		return parsed{}, fmt.Errorf("%w %q: path %q: want /<master>[/db]", ErrBadURL, where, u.Path)
	}
	if u.RawQuery != "" {
		return parsed{}, fmt.Errorf("%w %q: a Sentinel URL takes no options after '?'", ErrBadURL, where)
	}
	if u.User != nil {
		fo.Username = u.User.Username()
		fo.Password, _ = u.User.Password()
	}
	if c.Password != "" {
		fo.Password = c.Password
	}
	// TLS: no ServerName, so each connection checks the name it dials (a
	// sentinel's, then the master's).
	p.failover, p.db = fo, fo.DB
	return p, nil
}

// DefaultClusterReloadInterval is how often a Redis Cluster client reads
// the slot map again while it sends commands (go-redis: 60s). A master
// that died answers nothing, not MOVED, so this bounds how long commands
// keep going to it after its replica took over.
const DefaultClusterReloadInterval = time.Second

// parseCluster reads host:port[,host:port…] as cluster nodes; the path may
// only be empty or /0.
func (c ClientConfig) parseCluster(u *url.URL, p parsed) (parsed, error) {
	where := Redact(c.URL)
	co := &redis.ClusterOptions{TLSConfig: p.tls, ClusterStateReloadInterval: DefaultClusterReloadInterval}
	for _, hp := range strings.Split(u.Host, ",") {
		h, port, err := net.SplitHostPort(hp)
		if err != nil || h == "" || port == "" {
			return parsed{}, fmt.Errorf("%w %q: cluster node address %q: want host:port (several: host1:6379,host2:6379)", ErrBadURL, where, hp)
		}
		co.Addrs = append(co.Addrs, hp)
	}
	if path := strings.Trim(u.Path, "/"); path != "" && path != "0" {
		return parsed{}, fmt.Errorf("%w %q: database %q: a Redis Cluster has only database 0 (drop the path, or write /0)", ErrBadURL, where, path)
	}
	if u.RawQuery != "" {
		return parsed{}, fmt.Errorf("%w %q: a Redis Cluster URL takes no options after '?'", ErrBadURL, where)
	}
	if u.User != nil {
		co.Username = u.User.Username()
		co.Password, _ = u.User.Password()
	}
	if c.Password != "" {
		co.Password = c.Password
	}
	// TLS: no ServerName, so each connection checks the name of the node it
	// dials.
	p.cluster = co
	return p, nil
}

// tlsConfig builds the TLS settings from the PEM fields.
func (c ClientConfig) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // asked for, and warned about by the caller
	if len(c.CACertPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.CACertPEM) {
			return nil, errors.New("redis client config: CACertPEM holds no PEM certificate (want -----BEGIN CERTIFICATE-----)")
		}
		tc.RootCAs = pool
	}
	if len(c.ClientCertPEM) > 0 {
		cert, err := tls.X509KeyPair(c.ClientCertPEM, c.ClientKeyPEM)
		if err != nil {
			return nil, fmt.Errorf("redis client config: client certificate and key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// NewClientWithConfig returns a client for cfg: a plain client, with
// Sentinel a failover client that follows the master through failovers
// (reconnecting to the new master), or a *redis.ClusterClient for a Redis
// Cluster (it follows slots and failovers; every command the feed sends
// stays in one slot). It opens no connection; the caller
// closes the client. Errors name the URL with its password masked.
func NewClientWithConfig(cfg ClientConfig) (redis.UniversalClient, error) {
	p, err := cfg.parse()
	if err != nil {
		return nil, err
	}
	switch {
	case p.failover != nil:
		return redis.NewFailoverClient(p.failover), nil
	case p.cluster != nil:
		return redis.NewClusterClient(p.cluster), nil
	}
	return redis.NewClient(p.opt), nil
}

// Sentinels for errors.Is on Check errors about permissions (TLS failures
// are a *tlsx.Error).
var (
	// ErrNoPermission: the Redis user lacks a command or key permission
	// (NOPERM).
	ErrNoPermission = errors.New("the Redis user lacks a permission")
	// ErrAuth: the server refused the credentials (WRONGPASS, NOAUTH).
	ErrAuth = errors.New("Redis refused the credentials")
)

// PermissionError is a command Redis refused for lack of an ACL
// permission (NOPERM): no retry helps until an administrator grants it.
type PermissionError struct {
	Command string // lower case, e.g. "xadd" or "xgroup|create"; "" when not known (a key denial in a pipeline)
	Key     string // the key the command named first, when known
	// InScript: the command is EVAL/EVALSHA, and what the user may not
	// run is a command its Lua script calls.
	InScript bool
	Err      error // the NOPERM reply
}

func (e *PermissionError) Error() string {
	what := "command " + strings.ToUpper(e.Command)
	switch {
	case e.Command == "":
		what = "a command"
	case e.Key != "":
		what += " on key " + e.Key
	}
	if e.InScript {
		what = "a command called by the Lua script of " + what
	}
	return fmt.Sprintf("%s refused: %v", what, e.Err)
}

func (e *PermissionError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrNoPermission) true.
func (e *PermissionError) Is(target error) bool { return target == ErrNoPermission }

// IsNoPerm reports whether err is a Redis NOPERM reply, or the error a Lua
// script gets when it calls a command the user may not run (Redis 7.0:
// "ERR The user executing the script can't run this command or
// subcommand …"; 7.2+: "ERR ACL failure in script: …").
func IsNoPerm(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "NOPERM") || inScript(err))
}

// inScript reports whether err is a command a script called that the
// user may not run. Redis gives it no error code of its own, only this
// text.
func inScript(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.Contains(msg, "The user executing the script can't run this command") || strings.Contains(msg, "ACL failure in script")
}

// PermissionHook returns a go-redis hook that calls onDenied once per
// command Redis refuses with NOPERM (the command's reply keeps the error).
// Connection setup (HELLO, CLIENT …) is not reported: go-redis does
// without those. A process uses it to stop instead of retrying forever
// a command it will never be allowed to run.
func PermissionHook(onDenied func(*PermissionError)) redis.Hook { return permHook{onDenied} }

type permHook struct{ onDenied func(*PermissionError) }

func (permHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h permHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if IsNoPerm(err) && !setupCommand(cmd) {
			h.onDenied(denial(cmd, err, true))
		}
		return err
	}
}

// ProcessPipelineHook reports one denial per pipeline. Once a command of a
// pipeline fails, go-redis gives every command the same error, so the
// command is the one the NOPERM reply names ("… to run the 'xadd'
// command"); a key denial names no command, and then neither command nor
// key is told.
func (h permHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		var denied error
		for _, c := range cmds {
			if IsNoPerm(c.Err()) && !setupCommand(c) {
				denied = c.Err()
				break
			}
		}
		if denied == nil {
			return err
		}
		for _, c := range cmds {
			if strings.Contains(denied.Error(), "'"+strings.ToLower(c.Name())+"'") {
				h.onDenied(denial(c, denied, false))
				return err
			}
		}
		h.onDenied(&PermissionError{Err: denied})
		return err
	}
}

// setupCommand: go-redis sends these when it connects and does without
// them when refused.
func setupCommand(cmd redis.Cmder) bool {
	switch strings.ToLower(cmd.Name()) {
	case "hello", "client", "auth", "config": // config: ReadPersistence only asks
		return true
	}
	return false
}

// denial describes a refused command; withKey names its first key (only
// when the command alone failed: in a pipeline the key is not known).
func denial(cmd redis.Cmder, err error, withKey bool) *PermissionError {
	name := strings.ToLower(cmd.Name())
	args := cmd.Args()
	pe := &PermissionError{Command: name, Err: err, InScript: inScript(err)}
	if len(args) > 1 {
		switch name {
		case "xgroup", "xinfo", "config", "acl", "object", "memory", "script":
			pe.Command = name + "|" + strings.ToLower(fmt.Sprint(args[1]))
		}
	}
	if !withKey {
		return pe
	}
	switch name {
	case "evalsha", "eval", "evalsha_ro", "eval_ro":
		if len(args) > 3 {
			pe.Key = fmt.Sprint(args[3])
		}
	case "multi", "exec", "discard", "unwatch", "ping", "info", "select", "scan", "script":
	case "xreadgroup", "xread":
		for i, a := range args {
			if s, ok := a.(string); ok && strings.EqualFold(s, "streams") && i+1 < len(args) {
				pe.Key = fmt.Sprint(args[i+1])
			}
		}
	case "xgroup", "xinfo", "object", "memory":
		if len(args) > 2 {
			pe.Key = fmt.Sprint(args[2])
		}
	default:
		if len(args) > 1 {
			pe.Key = fmt.Sprint(args[1])
		}
	}
	return pe
}
