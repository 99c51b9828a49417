package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
	"github.com/es-changefeed/es-changefeed/tests/pgtest"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// runConsumeFlags parses args as consume's flags and calls fn with the
// parsed command instead of consuming.
func runConsumeFlags(tb testing.TB, args []string, fn func(*cli.Command) error) error {
	tb.Helper()
	cmd := consumeCommand()
	cmd.Writer, cmd.ErrWriter = io.Discard, io.Discard
	var got error
	cmd.Action = func(_ context.Context, c *cli.Command) error {
		got = fn(c)
		return nil
	}
	if err := cmd.Run(context.Background(), append([]string{"consume"}, args...)); err != nil {
		tb.Fatalf("consume %v: %v", args, err)
	}
	return got
}

// TestConsumeSinks_Flags: every sink's flags come from the table, each
// defined once in consume, and --sink lists every sink.
func TestConsumeSinks_Flags(t *testing.T) {
	defined := map[string]int{}
	for _, f := range consumeCommand().Flags {
		for _, n := range f.Names() {
			defined[n]++
		}
	}
	owner := map[string]string{}
	for _, s := range consumeSinks {
		for _, f := range s.flagNames() {
			if defined[f] != 1 {
				t.Errorf("--%s of the %s sink is defined %d times in consume, want once", f, s.name, defined[f])
			}
			if o, ok := owner[f]; ok {
				t.Errorf("--%s belongs to the %s sink and the %s sink", f, o, s.name)
			}
			owner[f] = s.name
		}
	}
	if got, want := sinkNames(), "stdout, file, http, bulk, redis or postgres"; got != want {
		t.Errorf("sinkNames() = %q, want %q", got, want)
	}
	for _, f := range consumeCommand().Flags {
		if f.Names()[0] == "sink" {
			if got, want := f.(cli.DocGenerationFlag).GetUsage(), sinkNames(); got != want {
				t.Errorf("--sink's usage is %q, want %q", got, want)
			}
		}
	}
	if got := consumeSinks[0].flagNames(); len(got) != 0 {
		t.Errorf("the stdout sink has flags %v", got)
	}
	for name, want := range map[string][]string{
		"bulk":  {"bulk-es", "bulk-index", "bulk-positions-index", "bulk-tombstone-keep", "bulk-user", "bulk-client-key"},
		"redis": {"cache-key", "cache-mode", "cache-ttl", "cache-redis", "cache-redis-password-file", "cache-redis-sentinel-master"},
		"postgres": {"postgres-url", "postgres-password", "postgres-password-file", "postgres-table", "postgres-schema", "postgres-index-deleted",
			"postgres-tombstone-keep", "postgres-max-batch"},
	} {
		for _, f := range want {
			if owner[f] != name {
				t.Errorf("--%s belongs to %q, want the %s sink", f, owner[f], name)
			}
		}
	}
}

// TestConsumeSinks_CheckSinkFlags: a flag of a sink not chosen is a usage
// error naming both sinks, from the command line or the environment.
func TestConsumeSinks_CheckSinkFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // "" = accepted
	}{
		{name: "default sink, no sink flag", args: nil},
		{name: "a flag of the sink chosen", args: []string{"--sink", "bulk", "--bulk-es", "http://x:9200", "--bulk-user", "u"}},
		{name: "the cache's Redis with the redis sink", args: []string{"--sink", "redis", "--cache-redis", "redis://c:6379/0"}},
		{name: "bulk flag with stdout", args: []string{"--sink", "stdout", "--bulk-es", "http://x:9200"},
			want: `--bulk-es belongs to --sink bulk, but --sink is "stdout": drop --bulk-es, or pass --sink bulk`},
		{name: "file flag with http", args: []string{"--sink", "http", "--http-url", "http://h/", "--file-path", "/tmp/x"},
			want: `--file-path belongs to --sink file, but --sink is "http": drop --file-path, or pass --sink file`},
		{name: "cache flag with bulk", args: []string{"--sink", "bulk", "--cache-mode", "set"},
			want: `--cache-mode belongs to --sink redis, but --sink is "bulk": drop --cache-mode, or pass --sink redis`},
		{name: "cache Redis flag with stdout", args: []string{"--cache-redis-password-file", "/pw"},
			want: `--cache-redis-password-file belongs to --sink redis, but --sink is "stdout"`},
		{name: "bulk TLS flag with file", args: []string{"--sink", "file", "--bulk-ca-cert", "/ca.pem"},
			want: `--bulk-ca-cert belongs to --sink bulk, but --sink is "file"`},
		{name: "postgres flag with bulk", args: []string{"--sink", "bulk", "--postgres-table", "t_{index}"},
			want: `--postgres-table belongs to --sink postgres, but --sink is "bulk": drop --postgres-table, or pass --sink postgres`},
		{name: "from the environment", args: []string{"--sink", "http"}, env: map[string]string{"ESCF_FILE_KEEP": "3"},
			want: `--file-keep belongs to --sink file, but --sink is "http"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			err := runConsumeFlags(t, tt.args, checkSinkFlags)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			var ue usageError
			if err == nil || !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("err = %v, want a usage error starting %q", err, tt.want)
			}
		})
	}
}

// TestConsumeSinks_NewSink builds the sinks that need no server, and
// checks the usage errors that come before any connection.
func TestConsumeSinks_NewSink(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		args    []string
		want    string // the sink's type; "" for an error
		wantErr string
	}{
		{name: "stdout by default", want: "*sink.Stdout"},
		{name: "file", args: []string{"--sink", "file", "--file-path", filepath.Join(dir, "events.jsonl")}, want: "*sink.File"},
		{name: "http", args: []string{"--sink", "http", "--http-url", "http://127.0.0.1:1/hook", "--http-header", "Authorization: Bearer x"}, want: "*sink.HTTP"},
		{name: "unknown sink", args: []string{"--sink", "kafka"}, wantErr: `--sink "kafka": want stdout, file, http, bulk, redis or postgres`},
		{name: "file without a path", args: []string{"--sink", "file"}, wantErr: "--sink file needs --file-path"},
		{name: "http without a URL", args: []string{"--sink", "http"}, wantErr: "--sink http needs --http-url"},
		{name: "http header without a colon", args: []string{"--sink", "http", "--http-url", "http://h/", "--http-header", "Authorization"},
			wantErr: `--http-header "Authorization": want "Name: value"`},
		{name: "http URL refused by the sink", args: []string{"--sink", "http", "--http-url", "ftp://h/"},
			wantErr: `--sink http: http sink config: URL "ftp://h/": scheme "ftp": want http or https`},
		{name: "file config refused by the sink", args: []string{"--sink", "file", "--file-path", "x", "--file-keep", "-1"},
			wantErr: "--sink file: file sink config: Keep = -1"},
		{name: "bulk without a cluster", args: []string{"--sink", "bulk"}, wantErr: "--sink bulk needs --bulk-es <target cluster URL>"},
		{name: "postgres without a URL", args: []string{"--sink", "postgres"}, wantErr: "--sink postgres needs --postgres-url <libpq URL>"},
		{name: "postgres bad URL, password masked", args: []string{"--sink", "postgres", "--postgres-url", "postgres://u:hunter2@h:notaport/db"},
			wantErr: "--sink postgres: postgres sink config: URL postgres://u:xxxxx@h:notaport/db"},
		{name: "postgres unknown placeholder", args: []string{"--sink", "postgres", "--postgres-url", "postgres://h/db", "--postgres-table", "t_{shard}"},
			wantErr: `--sink postgres: postgres sink config: Table "t_{shard}": unknown placeholder {shard}`},
		{name: "postgres bad index_deleted", args: []string{"--sink", "postgres", "--postgres-url", "postgres://h/db", "--postgres-index-deleted", "truncate"},
			wantErr: `--sink postgres: postgres sink config: IndexDeleted "truncate"`},
		{name: "postgres negative batch", args: []string{"--sink", "postgres", "--postgres-url", "postgres://h/db", "--postgres-max-batch", "-1"},
			wantErr: `--sink postgres: postgres sink config: MaxBatch = -1`},
		{name: "postgres password twice", args: []string{"--sink", "postgres", "--postgres-url", "postgres://h/db", "--postgres-password", "pw", "--postgres-password-file", "/pw"},
			wantErr: "--postgres-password and --postgres-password-file are both set"},
		{name: "cache Redis flag without --cache-redis", args: []string{"--sink", "redis", "--cache-redis-password", "pw"},
			wantErr: "--cache-redis-password needs --cache-redis: add --cache-redis <URL>, or drop --cache-redis-password"},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never reached: no sink here sends an event
	defer rdb.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s sink.Sink
			err := runConsumeFlags(t, tt.args, func(cmd *cli.Command) error {
				var err error
				s, err = newSink(context.Background(), cmd, rdb, redisx.NewKeys("f"), 1, log)
				return err
			})
			if tt.wantErr != "" {
				var ue usageError
				if err == nil || !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want a usage error starting %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("err = %v: the password shows", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			if got := fmt.Sprintf("%T", s); got != tt.want {
				t.Errorf("newSink built a %s, want a %s", got, tt.want)
			}
		})
	}
}

// TestConsumeSinks_Postgres builds the postgres sink against a real
// PostgreSQL (the sink's tables are created at start, and it records
// applied positions), and checks that a PostgreSQL that does not answer at
// start stops consume with an error naming the database, password masked.
func TestConsumeSinks_Postgres(t *testing.T) {
	pg := pgtest.Start(t)
	rdb := redistest.Start(t).Client(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	build := func(args ...string) (sink.Sink, error) {
		var s sink.Sink
		err := runConsumeFlags(t, append([]string{"--sink", "postgres"}, args...), func(cmd *cli.Command) error {
			var err error
			s, err = newSink(context.Background(), cmd, rdb, redisx.NewKeys("f"), 1, log)
			return err
		})
		return s, err
	}
	t.Run("up", func(t *testing.T) {
		s, err := build("--postgres-url", pg.URL("postgres"), "--postgres-password-file", pwFile, "--postgres-schema", "public")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		if got := fmt.Sprintf("%T", s); got != "*sink.Postgres" {
			t.Fatalf("newSink built a %s, want a *sink.Postgres", got)
		}
		if sinkPositions(s) == nil {
			t.Fatal("the postgres sink records no applied positions")
		}
		var n int
		if err := pg.Pool(t, "postgres").QueryRow(context.Background(),
			"SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename IN ('escf__indices', 'escf__tombstones', 'escf__applied', 'escf__applied_slots')").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 4 {
			t.Fatalf("%d of the sink's 4 tables exist after the start", n)
		}
	})
	t.Run("schema missing", func(t *testing.T) {
		_, err := build("--postgres-url", pg.URL("postgres"), "--postgres-schema", "nosuch")
		t.Log(err)
		if err == nil || !strings.Contains(err.Error(), "schema nosuch") || !strings.Contains(err.Error(), pg.Addr) {
			t.Fatalf("err = %v, want one naming the schema and the database", err)
		}
	})
	t.Run("down", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now
		for _, u := range []string{"postgres://escf:hunter2@" + addr + "/app?sslmode=disable",
			"host=127.0.0.1 port=" + addr[strings.LastIndexByte(addr, ':')+1:] + " user=escf password=hunter2 dbname=app sslmode=disable"} {
			start := time.Now()
			_, err := build("--postgres-url", u)
			if err == nil {
				t.Fatalf("%s: newSink succeeded with nothing listening", u)
			}
			msg := err.Error()
			t.Log(msg)
			if !strings.HasPrefix(msg, "--sink postgres: PostgreSQL at ") || !strings.Contains(msg, "xxxxx") || strings.Contains(msg, "hunter2") {
				t.Fatalf("err = %v, want one naming the database with its password masked", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("the start took %s to fail", d)
			}
		}
	})
}
