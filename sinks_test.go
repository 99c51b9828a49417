package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
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
	if got, want := sinkNames(), "stdout, file, http, bulk or redis"; got != want {
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
		{name: "unknown sink", args: []string{"--sink", "kafka"}, wantErr: `--sink "kafka": want stdout, file, http, bulk or redis`},
		{name: "file without a path", args: []string{"--sink", "file"}, wantErr: "--sink file needs --file-path"},
		{name: "http without a URL", args: []string{"--sink", "http"}, wantErr: "--sink http needs --http-url"},
		{name: "http header without a colon", args: []string{"--sink", "http", "--http-url", "http://h/", "--http-header", "Authorization"},
			wantErr: `--http-header "Authorization": want "Name: value"`},
		{name: "http URL refused by the sink", args: []string{"--sink", "http", "--http-url", "ftp://h/"},
			wantErr: `--sink http: http sink config: URL "ftp://h/": scheme "ftp": want http or https`},
		{name: "file config refused by the sink", args: []string{"--sink", "file", "--file-path", "x", "--file-keep", "-1"},
			wantErr: "--sink file: file sink config: Keep = -1"},
		{name: "bulk without a cluster", args: []string{"--sink", "bulk"}, wantErr: "--sink bulk needs --bulk-es <target cluster URL>"},
		{name: "cache Redis flag without --cache-redis", args: []string{"--sink", "redis", "--cache-redis-password", "pw"},
			wantErr: "--cache-redis-password needs --cache-redis: add --cache-redis <URL>, or drop --cache-redis-password"},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s sink.Sink
			err := runConsumeFlags(t, tt.args, func(cmd *cli.Command) error {
				var err error
				s, err = newSink(context.Background(), cmd, nil, redisx.NewKeys("f"), 1, log)
				return err
			})
			if tt.wantErr != "" {
				var ue usageError
				if err == nil || !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want a usage error starting %q", err, tt.wantErr)
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
