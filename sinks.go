package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/cmdflags"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/idempotency"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/internal/urlx"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
)

// consumeSinks are the sinks of consume --sink, in the order --sink's help
// lists them. An entry is all the command knows of a sink: its name, its
// flags (each with its environment variable and default, defined only
// there) and how to build it from them. consumeCommand defines --sink and
// every sink's flags from this table, checkSinkFlags refuses a flag of a
// sink not chosen, newSink builds the chosen one.
//
// Adding a sink: its file in sink/, an entry here (with its flags and
// build functions below), and a Test<Sink>_Contract that runs
// sinktest.Run (README.md, "Adding a sink").
var consumeSinks = []consumeSink{
	{name: "stdout", build: buildStdoutSink},
	{name: "file", flags: fileSinkFlags, build: buildFileSink},
	{name: "http", flags: httpSinkFlags, build: buildHTTPSink},
	{name: "bulk", flags: bulkSinkFlags, build: buildBulkSink},
	{name: "redis", flags: redisSinkFlags, build: buildRedisSink},
	{name: "postgres", flags: postgresSinkFlags, build: buildPostgresSink},
}

// consumeSink is one sink of consume --sink.
type consumeSink struct {
	// name is the value of --sink that chooses it.
	name string
	// flags defines the sink's flags, named after it (nil: none). Called
	// once per command built.
	flags func() []cli.Flag
	// build makes the sink from its parsed flags. Errors in the flags are
	// usage errors naming the flag.
	build func(ctx context.Context, cmd *cli.Command, env sinkEnv) (sink.Sink, error)
}

// sinkEnv is what consume hands every sink besides its flags.
type sinkEnv struct {
	rdb        redis.UniversalClient // the feed's Redis
	keys       redisx.Keys           // the feed's keys
	partitions int                   // the feed's partition count
	log        *slog.Logger
}

// flagNames are the names of the sink's flags.
func (s consumeSink) flagNames() []string {
	if s.flags == nil {
		return nil
	}
	var out []string
	for _, f := range s.flags() {
		out = append(out, f.Names()[0])
	}
	return out
}

// sinkFlags are --sink and every sink's flags, in the table's order.
func sinkFlags() []cli.Flag {
	flags := []cli.Flag{&cli.StringFlag{Name: "sink", Value: "stdout", Usage: sinkNames(), Sources: cli.EnvVars("ESCF_SINK")}}
	for _, s := range consumeSinks {
		if s.flags != nil {
			flags = append(flags, s.flags()...)
		}
	}
	return flags
}

// sinkNames lists the sinks for help and messages: "stdout, file, http,
// bulk, redis or postgres".
func sinkNames() string {
	names := make([]string, len(consumeSinks))
	for i, s := range consumeSinks {
		names[i] = s.name
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// checkSinkFlags refuses a flag of another sink than --sink's: it would be
// silently ignored.
func checkSinkFlags(cmd *cli.Command) error {
	chosen := cmd.String("sink")
	for _, s := range consumeSinks {
		if s.name == chosen {
			continue
		}
		for _, f := range s.flagNames() {
			if cmd.IsSet(f) {
				return usagef("--%s belongs to --sink %s, but --sink is %q: drop --%s, or pass --sink %s", f, s.name, chosen, f, s.name)
			}
		}
	}
	return nil
}

// newSink builds the sink named by --sink from its flags.
func newSink(ctx context.Context, cmd *cli.Command, rdb redis.UniversalClient, keys redisx.Keys, partitions int, log *slog.Logger) (sink.Sink, error) {
	name := cmd.String("sink")
	for _, s := range consumeSinks {
		if s.name == name {
			return s.build(ctx, cmd, sinkEnv{rdb: rdb, keys: keys, partitions: partitions, log: log})
		}
	}
	return nil, usagef("--sink %q: want %s", name, sinkNames())
}

// sinkPositions is the sink's store of applied positions, if it keeps
// one (redisx.Positions); nil otherwise.
func sinkPositions(s sink.Sink) redisx.Positions {
	p, _ := unwrapSink(s).(redisx.Positions)
	return p
}

// unwrapSink is the sink itself, without main's closingSink around it
// (whose methods are only Sink's).
func unwrapSink(s sink.Sink) sink.Sink {
	if c, ok := s.(closingSink); ok {
		return c.Sink
	}
	return s
}

// wrapUsage marks a sink's configuration error as a usage error.
func wrapUsage(sinkName string, err error) error {
	if err == nil {
		return nil
	}
	return usagef("--sink %s: %v", sinkName, err)
}

func buildStdoutSink(_ context.Context, cmd *cli.Command, _ sinkEnv) (sink.Sink, error) {
	s, err := sink.NewStdout(sink.StdoutConfig{Writer: cmd.Root().Writer})
	if err != nil {
		return nil, wrapUsage("stdout", err)
	}
	return s, nil
}

func fileSinkFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "file-path", Usage: "file sink: the file JSON lines are appended to", Sources: cli.EnvVars("ESCF_FILE_PATH")},
		&cli.Int64Flag{Name: "file-max-bytes", Value: sink.DefaultFileMaxBytes, Usage: "file sink: rotate past this size", Sources: cli.EnvVars("ESCF_FILE_MAX_BYTES")},
		&cli.IntFlag{Name: "file-keep", Value: sink.DefaultFileKeep, Usage: "file sink: rotated files kept", Sources: cli.EnvVars("ESCF_FILE_KEEP")},
	}
}

func buildFileSink(_ context.Context, cmd *cli.Command, _ sinkEnv) (sink.Sink, error) {
	if cmd.String("file-path") == "" {
		return nil, usagef("--sink file needs --file-path")
	}
	s, err := sink.NewFile(sink.FileConfig{Path: cmd.String("file-path"), MaxBytes: cmd.Int64("file-max-bytes"), Keep: cmd.Int("file-keep")})
	if err != nil {
		return nil, wrapUsage("file", err)
	}
	return s, nil
}

func httpSinkFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "http-url", Usage: "http sink: the webhook URL", Sources: cli.EnvVars("ESCF_HTTP_URL")},
		&cli.DurationFlag{Name: "http-timeout", Value: sink.DefaultHTTPTimeout, Usage: "http sink: timeout of one request", Sources: cli.EnvVars("ESCF_HTTP_TIMEOUT")},
		&cli.StringSliceFlag{Name: "http-header", Usage: `http sink: a header "Name: value" sent with every request (repeatable)`, Sources: cli.EnvVars("ESCF_HTTP_HEADER")},
	}
}

func buildHTTPSink(_ context.Context, cmd *cli.Command, env sinkEnv) (sink.Sink, error) {
	if cmd.String("http-url") == "" {
		return nil, usagef("--sink http needs --http-url")
	}
	headers := map[string]string{}
	for _, h := range cmd.StringSlice("http-header") {
		k, v, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, usagef("--http-header %q: want \"Name: value\"", h)
		}
		headers[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	s, err := sink.NewHTTP(sink.HTTPConfig{URL: cmd.String("http-url"), Headers: headers, Timeout: cmd.Duration("http-timeout")})
	if err != nil {
		return nil, wrapUsage("http", err)
	}
	hintFewWorkers(cmd, env, "http", "a request")
	return s, nil
}

// bulkSinkFlags are the bulk sink's own flags and the TLS and credential
// flags of its target (clusterFlags "bulk").
func bulkSinkFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringSliceFlag{Name: "bulk-es", Usage: "bulk sink: the target cluster's URL (repeatable)", Sources: cli.EnvVars("ESCF_BULK_ES_URL")},
		&cli.StringFlag{Name: "bulk-index", Value: sink.DefaultBulkIndexTemplate, Usage: "bulk sink: target index name template ({index}, {index_uuid})", Sources: cli.EnvVars("ESCF_BULK_INDEX")},
		&cli.StringFlag{Name: "bulk-positions-index", Value: sink.DefaultBulkPositionsIndex, Usage: "bulk sink: the target index where the sink records how far it applied the stream (checked at start: a feed's Redis that lost entries the mirror applied is history lost)", Sources: cli.EnvVars("ESCF_BULK_POSITIONS_INDEX")},
		&cli.DurationFlag{Name: "bulk-tombstone-keep", Value: idempotency.DefaultTombstoneKeep, Usage: "bulk sink: how long a delete is remembered in Redis, so that an older upsert applied later cannot bring the document back once the target forgot the delete (index.gc_deletes)", Sources: cli.EnvVars("ESCF_BULK_TOMBSTONE_KEEP")},
	}, cmdflags.ClusterFlags("bulk", "ESCF_BULK", "the bulk sink's target cluster")...)
}

// buildBulkSink contacts the target cluster once, so that bad URLs,
// credentials or certificates stop consume at once instead of
// dead-lettering events.
func buildBulkSink(ctx context.Context, cmd *cli.Command, env sinkEnv) (sink.Sink, error) {
	urls := cmdflags.SplitList(cmd.StringSlice("bulk-es"))
	if len(urls) == 0 {
		return nil, usagef("--sink bulk needs --bulk-es <target cluster URL>")
	}
	ecfg, err := cmdflags.ClusterConn(cmd, "bulk", urls)
	if err != nil {
		return nil, err
	}
	client, err := cmdflags.ConnectCluster(ctx, ecfg, "bulk-es", "bulk", "bulk sink: ", false, env.log)
	if err != nil {
		return nil, fmt.Errorf("--sink bulk: %w", err)
	}
	s, err := sink.NewBulk(sink.BulkConfig{ES: client, Redis: env.rdb, Keys: env.keys, Partitions: env.partitions, IndexTemplate: cmd.String("bulk-index"),
		TombstoneKeep: cmd.Duration("bulk-tombstone-keep"), PositionsIndex: cmd.String("bulk-positions-index"), Logger: env.log})
	if err != nil {
		return nil, wrapUsage("bulk", err)
	}
	hintFewWorkers(cmd, env, "bulk", "a _bulk request")
	return s, nil
}

// redisSinkFlags are the redis sink's own flags and those of its cache's
// Redis (redisFlags "cache-redis").
func redisSinkFlags() []cli.Flag {
	cache := cmdflags.RedisFlags("cache-redis", "ESCF_CACHE_REDIS", "the redis sink's cache", "")
	cache[0].(*cli.StringFlag).DefaultText = "the feed's Redis"
	return append([]cli.Flag{
		&cli.StringFlag{Name: "cache-key", Value: sink.DefaultRedisKey, Usage: "redis sink: key template ({index}, {index_uuid}, {shard}, {id}, {routing})", Sources: cli.EnvVars("ESCF_CACHE_KEY")},
		&cli.StringFlag{Name: "cache-mode", Value: string(sink.DefaultRedisMode), Usage: "redis sink: del (invalidate) or set (write the document)", Sources: cli.EnvVars("ESCF_CACHE_MODE")},
		&cli.DurationFlag{Name: "cache-ttl", Usage: "redis sink: TTL of keys written in set mode (0: none)", Sources: cli.EnvVars("ESCF_CACHE_TTL")},
	}, cache...)
}

// buildRedisSink writes into the feed's Redis, or into --cache-redis,
// which it opens and checks (and the sink's Close closes).
func buildRedisSink(ctx context.Context, cmd *cli.Command, env sinkEnv) (sink.Sink, error) {
	cfg := sink.RedisConfig{Key: cmd.String("cache-key"), Mode: sink.RedisMode(cmd.String("cache-mode")), TTL: cmd.Duration("cache-ttl")}
	cfg.Client = env.rdb
	var cache redis.UniversalClient
	if cmd.String("cache-redis") != "" {
		var err error
		if cache, err = cmdflags.ConnectCache(ctx, cmd, env.log); err != nil {
			return nil, err
		}
		cfg.Client = cache
	} else if used := cmdflags.SetFlags(cmd, cmdflags.RedisFlagNames("cache-redis")); len(used) > 0 {
		return nil, usagef("--%s needs --cache-redis: add --cache-redis <URL>, or drop --%s (the feed's Redis is the cache by default, with the --redis flags)", used[0], used[0])
	}
	s, err := sink.NewRedis(cfg)
	if err != nil {
		if cache != nil {
			cache.Close()
		}
		return nil, wrapUsage("redis", err)
	}
	if cache != nil {
		return closingSink{s, cache}, nil
	}
	return s, nil
}

func postgresSinkFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "postgres-url", Usage: "postgres sink: the database, as libpq names it: postgres://user@host:5432/db?sslmode=verify-full, or \"host=… dbname=…\" (the PG* environment variables fill what it leaves out)",
			Sources: cli.EnvVars("ESCF_POSTGRES_URL")},
		&cli.StringFlag{Name: "postgres-password", Usage: "postgres sink: the password, replacing the URL's (better: the environment variable, PGPASSWORD, ~/.pgpass or --postgres-password-file)",
			Sources: cli.EnvVars("ESCF_POSTGRES_PASSWORD")},
		&cli.StringFlag{Name: "postgres-password-file", Usage: "postgres sink: file holding the password (one line), replacing the URL's",
			Sources: cli.EnvVars("ESCF_POSTGRES_PASSWORD_FILE")},
		&cli.StringFlag{Name: "postgres-table", Value: sink.DefaultPostgresTable, Usage: "postgres sink: table name template ({index}, {index_uuid}); other characters than letters, digits and '_' become '_', names over 63 bytes end with a hash",
			Sources: cli.EnvVars("ESCF_POSTGRES_TABLE")},
		&cli.StringFlag{Name: "postgres-schema", Value: sink.DefaultPostgresSchema, Usage: "postgres sink: the schema of the tables (it must exist)",
			Sources: cli.EnvVars("ESCF_POSTGRES_SCHEMA")},
		&cli.StringFlag{Name: "postgres-index-deleted", Value: string(sink.DefaultPostgresIndexDeleted), Usage: "postgres sink: what an index_deleted event does to the index's rows: delete, drop (the table) or keep",
			Sources: cli.EnvVars("ESCF_POSTGRES_INDEX_DELETED")},
		&cli.DurationFlag{Name: "postgres-tombstone-keep", Value: idempotency.DefaultTombstoneKeep, Usage: "postgres sink: how long a delete is remembered (escf__tombstones), so that an older upsert applied later cannot bring the row back",
			Sources: cli.EnvVars("ESCF_POSTGRES_TOMBSTONE_KEEP")},
		&cli.IntFlag{Name: "postgres-max-batch", Value: sink.DefaultPostgresMaxBatch, Usage: "postgres sink: the most events one transaction applies",
			Sources: cli.EnvVars("ESCF_POSTGRES_MAX_BATCH")},
	}
}

// postgresPingTimeout bounds buildPostgresSink's first contact.
const postgresPingTimeout = 15 * time.Second

// fewWorkers: below this many lanes a batching sink's batches are small
// (each lane hands it one event at a time, so a batch holds at most
// --workers events: an HTTP request, a _bulk, a transaction) and consume
// says so at start.
const fewWorkers = 64

// hintFewWorkers logs that --workers caps the batches of a batching sink
// (what: its batch) when it is below fewWorkers.
func hintFewWorkers(cmd *cli.Command, env sinkEnv, sinkName, what string) {
	if w := cmd.Int("workers"); w < fewWorkers {
		env.log.Info(fmt.Sprintf("few lanes for the %s sink: %s holds at most --workers events (each lane hands it one at a time); pass --workers 512 or more for throughput (docs/PERFORMANCE.md)", sinkName, what),
			logkey.Workers, w)
	}
}

// buildPostgresSink opens the database and checks it once (it answers,
// and the sink may create its tables in the schema), so that a bad URL,
// password or schema stops consume at once, naming the database with its
// password masked.
func buildPostgresSink(ctx context.Context, cmd *cli.Command, env sinkEnv) (sink.Sink, error) {
	u := cmd.String("postgres-url")
	if u == "" {
		return nil, usagef("--sink postgres needs --postgres-url <libpq URL>, e.g. postgres://escf@127.0.0.1:5432/app")
	}
	pw, err := cmdflags.Secret(cmd, "postgres-password", "postgres-password-file")
	if err != nil {
		return nil, err
	}
	s, err := sink.NewPostgres(sink.PostgresConfig{URL: u, Password: pw, Table: cmd.String("postgres-table"), Schema: cmd.String("postgres-schema"),
		IndexDeleted: sink.PostgresIndexDeleted(cmd.String("postgres-index-deleted")), TombstoneKeep: cmd.Duration("postgres-tombstone-keep"),
		MaxBatch: cmd.Int("postgres-max-batch"), Redis: env.rdb, Keys: env.keys, Logger: env.log})
	if err != nil {
		return nil, wrapUsage("postgres", err)
	}
	hintFewWorkers(cmd, env, "postgres", "a transaction")
	pctx, cancel := context.WithTimeout(ctx, postgresPingTimeout)
	defer cancel()
	if err := s.Ping(pctx); err != nil {
		_ = s.Close(context.Background())
		return nil, fmt.Errorf("--sink postgres: PostgreSQL at %s: %w", urlx.RedactConn(u), err)
	}
	return s, nil
}

// closingSink is a sink whose Redis client main opened: Close closes both.
type closingSink struct {
	sink.Sink
	client redis.UniversalClient
}

func (s closingSink) Close(ctx context.Context) error {
	err := s.Sink.Close(ctx)
	if cerr := s.client.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}
