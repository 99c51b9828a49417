package cmdflags

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/internal/tlsx"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// securityDoc is where the Redis ACL rules and TLS setup are documented.
const securityDoc = "docs/SECURITY.md"

// RedisFlags are the flags of one Redis connection: --<prefix> (the URL)
// and its TLS and credential flags --<prefix>-password, -password-file,
// -ca-cert, -client-cert, -client-key, -insecure, -sentinel-master, each
// also read from <env>_… . def is the URL's default ("" for none).
func RedisFlags(prefix, env, what, def string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: prefix, Value: def, Usage: what + " URL: redis://[user:password@]host:port/db, rediss:// (TLS), redis-sentinel://[user:password@]host:26379[,host:26379]/<master>[/db] (rediss-sentinel:// for TLS), or redis-cluster://[user:password@]host:port[,host:port] for Redis Cluster (rediss-cluster:// for TLS)",
			Sources: cli.EnvVars(env + "_URL")},
		&cli.StringFlag{Name: prefix + "-password", Usage: "password of " + what + ", replacing the URL's (better: the environment variable or --" + prefix + "-password-file)",
			Sources: cli.EnvVars(env + "_PASSWORD")},
		&cli.StringFlag{Name: prefix + "-password-file", Usage: "file holding the password of " + what + " (one line), replacing the URL's",
			Sources: cli.EnvVars(env + "_PASSWORD_FILE")},
		&cli.StringFlag{Name: prefix + "-ca-cert", Usage: "PEM file of the CA(s) that signed the certificate of " + what + " (rediss://)",
			DefaultText: "the system's", Sources: cli.EnvVars(env + "_CA_CERT")},
		&cli.StringFlag{Name: prefix + "-client-cert", Usage: "PEM client certificate for " + what + " (rediss:// with tls-auth-clients; with --" + prefix + "-client-key)",
			Sources: cli.EnvVars(env + "_CLIENT_CERT")},
		&cli.StringFlag{Name: prefix + "-client-key", Usage: "PEM key of --" + prefix + "-client-cert",
			Sources: cli.EnvVars(env + "_CLIENT_KEY")},
		&cli.BoolFlag{Name: prefix + "-insecure", Usage: "do not verify the TLS certificate of " + what + " (logs a warning)",
			Sources: cli.EnvVars(env + "_INSECURE")},
		&cli.StringFlag{Name: prefix + "-sentinel-master", Usage: "find " + what + " through Sentinel: the URL's host:port is a sentinel, this the master's name",
			Sources: cli.EnvVars(env + "_SENTINEL_MASTER")},
	}
}

// RedisFlagNames are the names RedisFlags defines for prefix, URL flag
// first.
func RedisFlagNames(prefix string) []string {
	var out []string
	for _, f := range RedisFlags(prefix, "", "", "") {
		out = append(out, f.Names()[0])
	}
	return out
}

// RedisConfig reads the flags of RedisFlags(prefix, …) into a client
// config: files are read, the password file's trailing newline dropped,
// and the combination validated. Errors are usage errors naming the flag;
// no password appears in them.
func RedisConfig(cmd *cli.Command, prefix string) (redisx.ClientConfig, error) {
	cfg := redisx.ClientConfig{URL: cmd.String(prefix), Password: cmd.String(prefix + "-password"),
		InsecureSkipVerify: cmd.Bool(prefix + "-insecure"), SentinelMaster: cmd.String(prefix + "-sentinel-master")}
	if _, err := url.Parse(cfg.URL); err != nil {
		// Not err itself: a *url.Error quotes the whole URL, password included.
		return cfg, Usagef("--%s %q: %v", prefix, redisx.Redact(cfg.URL), err.(*url.Error).Err)
	}
	var err error
	if cfg.Password, err = Secret(cmd, prefix+"-password", prefix+"-password-file"); err != nil {
		return cfg, err
	}
	if cfg.CACertPEM, err = flagFile(cmd, prefix+"-ca-cert"); err != nil {
		return cfg, err
	}
	if cfg.ClientCertPEM, err = flagFile(cmd, prefix+"-client-cert"); err != nil {
		return cfg, err
	}
	if cfg.ClientKeyPEM, err = flagFile(cmd, prefix+"-client-key"); err != nil {
		return cfg, err
	}
	if cfg.InsecureSkipVerify && cmd.String(prefix+"-ca-cert") != "" {
		return cfg, Usagef("--%s-ca-cert and --%s-insecure contradict each other: verify the certificate with the CA, or skip verification, not both", prefix, prefix)
	}
	if (cmd.String(prefix+"-client-cert") == "") != (cmd.String(prefix+"-client-key") == "") {
		return cfg, Usagef("--%s-client-cert and --%s-client-key go together: pass both", prefix, prefix)
	}
	if !cfg.TLS() {
		for _, f := range []string{"-ca-cert", "-client-cert", "-client-key", "-insecure"} {
			if cmd.IsSet(prefix + f) {
				return cfg, Usagef("--%s%s needs TLS, but --%s %s is not: use rediss:// (or rediss-sentinel://)", prefix, f, prefix, redisx.Redact(cfg.URL))
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, Usagef("--%s: %v", prefix, err)
	}
	return cfg, nil
}

// ConnectRedis opens the feed's Redis and checks it before anything is
// written: reachable, a Redis server, TLS trusted both ways, credentials
// accepted, the database exists, and the feed's keys that exist have the
// feed's types. onDenied, if not nil, is called on every command Redis
// refuses for lack of a permission (NOPERM) later on: no retry can fix
// that, so the caller stops.
func ConnectRedis(ctx context.Context, cfg redisx.ClientConfig, keys redisx.Keys, log *slog.Logger, onDenied func(*redisx.PermissionError)) (redis.UniversalClient, error) {
	rdb, err := redisx.NewClientWithConfig(cfg)
	if err != nil {
		return nil, UsageError{Err: fmt.Errorf("--redis: %w", err)}
	}
	if cfg.InsecureSkipVerify && log != nil {
		WarnInsecure(log, "redis-insecure", cfg.Redacted())
	}
	if err := redisx.Check(ctx, rdb, cfg); err != nil {
		rdb.Close()
		return nil, ExplainRedis(fmt.Errorf("--redis: %w", err), "redis", cfg)
	}
	if err := redisx.CheckKeyTypes(ctx, rdb, keys); err != nil {
		rdb.Close()
		var wt *redisx.WrongTypeError
		if errors.As(err, &wt) {
			return nil, fmt.Errorf("feed %q: key %s in %s is a %s, not a %s: it is not this feed's; use another --feed (or Redis database), or delete the key if nothing needs it (es-changefeed leaves it alone)",
				keys.Feed(), wt.Key, cfg.Redacted(), wt.Type, wt.Want)
		}
		return nil, ExplainRedis(err, "redis", cfg)
	}
	if onDenied != nil {
		rdb.AddHook(redisx.PermissionHook(onDenied))
	}
	return rdb, nil
}

// WarnPersistence says, once at start, what the feed's Redis may lose of
// what it acknowledged, and what happens then (docs/RELIABILITY.md). A
// server that refuses CONFIG GET is not asked again (the permission hook
// lets that refusal pass: setupCommand).
func WarnPersistence(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger) {
	p, err := redisx.ReadPersistence(ctx, rdb)
	if err != nil {
		log.Debug("cannot read Redis's persistence settings (CONFIG GET refused?)", logkey.Error, err.Error())
		return
	}
	if risk := p.Risk(); risk != "" {
		log.Warn(risk+". The relay repairs the losses it sees; consumers whose sink records its applied position (bulk, redis, file) stop with history lost on the rest and say to run --bootstrap. "+
			"appendfsync always, or --wait-replicas, makes acknowledged commits durable (docs/RELIABILITY.md)",
			logkey.AppendOnly, p.AppendOnly, logkey.AppendFsync, p.AppendFsync)
	}
}

// ExplainRedis adds to a Redis error what to do about it, naming the
// flags of prefix ("redis" or "cache-redis").
func ExplainRedis(err error, prefix string, cfg redisx.ClientConfig) error {
	var pe *redisx.PermissionError
	var te *tlsx.Error
	switch {
	case errors.As(err, &pe) && pe.Command == "":
		return fmt.Errorf("%v: the Redis user %s may not use a key it needs: grant it the feed's keys (ACL SETUSER <user> ~escf:{<feed>}:*); %s lists the ACL rules es-changefeed needs",
			err, redisUser(cfg), securityDoc)
	case errors.As(err, &pe) && pe.InScript:
		return fmt.Errorf("%v: the Redis user %s may run %s but not a command its script calls: grant those (the lease's scripts call GET, PEXPIRE and DEL; the redis sink's HGET, HSET, SET and DEL); %s lists the ACL rules es-changefeed needs",
			err, redisUser(cfg), strings.ToUpper(pe.Command), securityDoc)
	case errors.As(err, &pe):
		return fmt.Errorf("%v: the Redis user %s lacks this permission: grant it (ACL SETUSER <user> +%s and the key pattern ~escf:{<feed>}:*); %s lists the ACL rules es-changefeed needs",
			err, redisUser(cfg), pe.Command, securityDoc)
	case redisx.IsNoPerm(err):
		return fmt.Errorf("%v: the Redis user %s lacks a permission: grant it the commands and the feed's keys (~escf:{<feed>}:*); %s lists the ACL rules es-changefeed needs",
			err, redisUser(cfg), securityDoc)
	case errors.Is(err, redisx.ErrAuth):
		return fmt.Errorf("%v: check the user and password (in --%s, --%s-password or --%s-password-file)", err, prefix, prefix, prefix)
	case errors.As(err, &te):
		return explainTLS(err, te, redisTLSPeer(prefix))
	}
	return err
}

// redisUser names the Redis user of a URL for messages ("default" when
// the URL names none).
func redisUser(cfg redisx.ClientConfig) string {
	if u, err := url.Parse(cfg.URL); err == nil && u.User != nil && u.User.Username() != "" {
		return fmt.Sprintf("%q", u.User.Username())
	}
	return `"default"`
}

// PermissionStop makes the first NOPERM a process sees stop it: cancel
// ends ctx with the denial as its cause, and DeniedCause finds it again.
func PermissionStop(cancel context.CancelCauseFunc) func(*redisx.PermissionError) {
	return func(pe *redisx.PermissionError) { cancel(pe) }
}

// DeniedCause returns the NOPERM that ended ctx (explained), or nil.
func DeniedCause(ctx context.Context, cfg redisx.ClientConfig) error {
	var pe *redisx.PermissionError
	if cause := context.Cause(ctx); errors.As(cause, &pe) {
		return ExplainRedis(fmt.Errorf("Redis at %s refused a command: %w", cfg.Redacted(), pe), "redis", cfg)
	}
	return nil
}

// SetFlags returns the names among flags that are set.
func SetFlags(cmd *cli.Command, flags []string) []string {
	var out []string
	for _, f := range flags {
		if cmd.IsSet(f) {
			out = append(out, f)
		}
	}
	return out
}

// ConnectCache opens and checks the redis sink's own Redis (--cache-redis
// and its flags).
func ConnectCache(ctx context.Context, cmd *cli.Command, log *slog.Logger) (redis.UniversalClient, error) {
	cfg, err := RedisConfig(cmd, "cache-redis")
	if err != nil {
		return nil, err
	}
	rdb, err := redisx.NewClientWithConfig(cfg)
	if err != nil {
		return nil, Usagef("--cache-redis: %v", err)
	}
	if cfg.InsecureSkipVerify {
		WarnInsecure(log, "cache-redis-insecure", cfg.Redacted())
	}
	if err := redisx.Check(ctx, rdb, cfg); err != nil {
		rdb.Close()
		return nil, ExplainRedis(fmt.Errorf("--cache-redis: %w", err), "cache-redis", cfg)
	}
	return rdb, nil
}
