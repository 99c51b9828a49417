package main

import (
	"context"
	"errors"
	"io"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/internal/cmdflags"

	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
)

// parseRun runs the `run` command's flag parsing (not its action) on args.
// cliErr is urfave/cli's own refusal (a bad duration, an unknown flag).
func parseRun(args ...string) (cfg runConfig, parseErr, cliErr error) {
	run := runCommand()
	run.Action = func(_ context.Context, cmd *cli.Command) error {
		cfg, parseErr = parseRunFlags(cmd)
		return nil
	}
	app := &cli.Command{Name: "es-changefeed", Writer: io.Discard, ErrWriter: io.Discard,
		ExitErrHandler: func(context.Context, *cli.Command, error) {}, Commands: []*cli.Command{run}}
	cliErr = app.Run(context.Background(), append([]string{"es-changefeed", "run"}, args...))
	return cfg, parseErr, cliErr
}

// FuzzRunFlags: the flags of `run` (and `resync`) never panic the parser;
// a refusal is a usage error (exit 2) that does not show the password of
// the Redis URL prefix + "u:" + password + "@" + rest (the ES URLs'
// passwords: FuzzConfig in es); an accepted command line keeps what
// was given: --index reaches SplitTargets whole (so "logs-*,-logs-debug*"
// is one expression, as documented), --es is split at commas, --feed
// passes ValidateFeed, --poll-interval is positive.
func FuzzRunFlags(f *testing.F) {
	f.Add("redis://", "s3cr3t-pw", "localhost:6379/0", "http://localhost:9200", "orders", "default", "1s")
	f.Add("redis://", "s3cr3t-pw", "localhost:6379/0", "http://a:9200,http://b:9200", "logs-*,-logs-debug*,metrics", "feed-1", "250ms")
	f.Add("rediss://", "p@ss/w0rd", "h:1", "https://u:p@h:1", "a,,-b", "f", "1h")
	f.Add("redis://", "with space", "h", "http://h", "a", "f", "1s")
	f.Add("redis://", "s3cr3t-pw", "h:port", "http://h", "a", "f", "1s")
	f.Add("", "s3cr3t-pw", "h", "http://h", "a", "f", "1s")
	f.Add("redis://", "s3cr3t-pw", "h", "ftp://h", "a", "f", "0s")
	f.Add("redis://", "s3cr3t-pw", "h", "http://h", "", "f{x}", "-1s")
	f.Add("redis://", "s3cr3t-pw", "h", "http://h", " , ", "", "1")
	f.Add("redis://", "s3cr3t-pw", "h", "http://h,,", "ünï-*", "ünï", "9223372036s")
	f.Fuzz(func(t *testing.T, redisPrefix, pass, rest, esURL, index, feed, poll string) {
		redisURL := redisPrefix + "u:" + pass + "@" + rest
		cfg, err, cliErr := parseRun("--redis="+redisURL, "--es="+esURL, "--index="+index, "--feed="+feed, "--poll-interval="+poll)
		if cliErr != nil {
			return // urfave/cli's own flag errors name the flag and its value only
		}
		if err != nil {
			var ue usageError
			if !errors.As(err, &ue) {
				t.Fatalf("refusal %v is not a usage error", err)
			}
			around := redisPrefix + "u:@" + rest + esURL + index + feed + poll
			around += strconv.Quote(around) // what %q makes of it: "\x00" + "00" has "0000"
			const texts = `bad Redis URL bad Elasticsearch URL want redis://host:port/db or rediss:// http://host:9200 https://host:9200 ` +
				`scheme no host invalid URL escape invalid port after host invalid character in host name net/url: invalid userinfo ` +
				`invalid control character in URL missing protocol scheme first path segment in URL cannot contain colon xxxxx ` +
				`--redis --es --index --feed feed name --poll-interval no index to follow: pass --index <name, pattern, alias or data stream> (or ESCF_INDEX)`
			cands := []string{pass, url.PathEscape(pass), url.QueryEscape(pass)}
			if dec, derr := url.PathUnescape(pass); derr == nil {
				cands = append(cands, dec)
			}
			for _, p := range cands {
				if len(p) >= 4 && !strings.Contains(around, p) && !strings.Contains(texts, p) && strings.Contains(err.Error(), p) {
					t.Fatalf("password %q shows in the usage error: %v", pass, err)
				}
			}
			return
		}
		if want := relay.SplitTargets([]string{index}); !reflect.DeepEqual(cfg.feed.Targets, want) {
			t.Fatalf("--index=%q gave targets %q, want %q", index, cfg.feed.Targets, want)
		}
		if want := cmdflags.SplitList([]string{esURL}); !reflect.DeepEqual(cfg.es.URLs, want) {
			t.Fatalf("--es=%q gave %q, want %q", esURL, cfg.es.URLs, want)
		}
		if cfg.redis.URL != redisURL || cfg.feed.Feed != feed || redisx.ValidateFeed(cfg.feed.Feed) != nil {
			t.Fatalf("redis %q feed %q, want %q and %q", cfg.redis.URL, cfg.feed.Feed, redisURL, feed)
		}
		if cfg.feed.PollInterval <= 0 {
			t.Fatalf("--poll-interval=%q accepted as %s", poll, cfg.feed.PollInterval)
		}
	})
}
