// Command es-changefeed turns Elasticsearch/OpenSearch shard sequence numbers
// into a Redis Stream of created, updated and deleted documents.
//
//	go run . demo                       # everything in-process, prints events
//	go run . run --index orders         # follow a real cluster
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay/es"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the job failed: a dependency is unreachable, refused us, or broke
	exitUsage   = 2 // bad flags or configuration
)

// usageError marks errors in what the user asked for.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func main() {
	os.Exit(runMain(os.Args, os.Stdout, os.Stderr))
}

// runMain runs the CLI and maps its error to an exit code. The first
// SIGINT/SIGTERM starts a graceful stop; a second one aborts.
func runMain(args []string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		<-sigs
		cancel()
		<-sigs
		fmt.Fprintln(stderr, "es-changefeed: second signal: aborting")
		os.Exit(130)
	}()
	app := &cli.Command{
		Name:           "es-changefeed",
		Usage:          "a change feed for Elasticsearch and OpenSearch, delivered through a Redis Stream",
		Writer:         stdout,
		ErrWriter:      stderr,
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		OnUsageError: func(_ context.Context, _ *cli.Command, err error, _ bool) error {
			return usageError{err}
		},
		Commands: []*cli.Command{runCommand(), resyncCommand(), consumeCommand(), statusCommand(), demoCommand()},
	}
	err := app.Run(ctx, args)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "es-changefeed: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || isCLIUsage(err) {
		return exitUsage
	}
	return exitFailure
}

// isCLIUsage recognizes urfave/cli's own flag errors.
func isCLIUsage(err error) bool {
	msg := err.Error()
	for _, s := range []string{"flag provided but not defined", "Required flag", "invalid value", "No help topic", "flag needs an argument"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// logFlags are shared by every long-running command.
func logFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json", Sources: cli.EnvVars("ESCF_LOG_FORMAT")},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", Sources: cli.EnvVars("ESCF_LOG_LEVEL")},
	}
}

// newLogger builds the process logger from the log flags.
func newLogger(cmd *cli.Command, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cmd.String("log-level"))); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", cmd.String("log-level"))
	}
	opts := &slog.HandlerOptions{Level: level}
	var log *slog.Logger
	switch cmd.String("log-format") {
	case "text":
		log = slog.New(slog.NewTextHandler(w, opts))
	case "json":
		log = slog.New(slog.NewJSONHandler(w, opts))
	default:
		return nil, usagef("--log-format %q: want text or json", cmd.String("log-format"))
	}
	redis.SetLogger(redisLog{log})
	return log, nil
}

// redisLog takes go-redis's own log lines (one per failed dial while Redis
// is down) to the debug level: the commands say a Redis outage once, and
// its end once, themselves.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}

// splitList flattens repeatable, comma-separated flag values.
func splitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

func ownerName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

func positiveDuration(name string) func(time.Duration) error {
	return func(d time.Duration) error {
		if d <= 0 {
			return usagef("--%s %s: want a positive duration such as 1s", name, d)
		}
		return nil
	}
}

// checkFeed validates a feed name: redisx.ValidateFeed (braces, ':' and
// whitespace would break the hash tag or the key layout), and no control
// characters (they would garble every log line and redis-cli listing).
func checkFeed(feed string) error {
	if err := redisx.ValidateFeed(feed); err != nil {
		return usagef("--feed: %v", err)
	}
	for _, r := range feed {
		if r < 0x20 || r == 0x7f {
			return usagef("--feed: feed name %q contains the control character %q: use letters, digits, '-', '_' or '.'", feed, r)
		}
	}
	return nil
}

// needs refuses flags that only mean something together with another one:
// each of flags, when set, needs on to be true.
func needs(cmd *cli.Command, on string, flags ...string) error {
	if cmd.Bool(on) {
		return nil
	}
	for _, f := range flags {
		if cmd.IsSet(f) {
			return usagef("--%s needs --%s: add --%s, or drop --%s", f, on, on, f)
		}
	}
	return nil
}

// caCertFlag is --<prefix>-ca-cert: the PEM file of the CAs a cluster's
// certificate must chain to.
func caCertFlag(prefix, env, what string) cli.Flag {
	return &cli.StringFlag{Name: prefix + "-ca-cert", Usage: "PEM file of the CA(s) that signed " + what + "'s certificate (default: the system's)",
		Sources: cli.EnvVars(env + "_CA_CERT")}
}

// insecureFlag is --<prefix>-insecure: no certificate verification.
func insecureFlag(prefix, env, what string) cli.Flag {
	return &cli.BoolFlag{Name: prefix + "-insecure", Usage: "do not verify " + what + "'s TLS certificate (logs a warning)",
		Sources: cli.EnvVars(env + "_INSECURE")}
}

// clusterTLS reads --<prefix>-ca-cert and --<prefix>-insecure.
func clusterTLS(cmd *cli.Command, prefix string) (caPEM []byte, insecure bool, err error) {
	caFlag, insFlag := prefix+"-ca-cert", prefix+"-insecure"
	path, insecure := cmd.String(caFlag), cmd.Bool(insFlag)
	if path != "" && insecure {
		return nil, false, usagef("--%s and --%s contradict each other: verify the certificate with the CA, or skip verification, not both", caFlag, insFlag)
	}
	if path == "" {
		return nil, insecure, nil
	}
	caPEM, err = os.ReadFile(path)
	if err != nil {
		return nil, false, usagef("--%s: %v", caFlag, err)
	}
	if err := (es.Config{CACertPEM: caPEM}).Validate(); err != nil {
		return nil, false, usagef("--%s %s: no PEM certificate in it (want the CA certificate, -----BEGIN CERTIFICATE-----)", caFlag, path)
	}
	return caPEM, insecure, nil
}

// warnInsecure logs that certificate checks are off.
func warnInsecure(log *slog.Logger, flag, urls string) {
	log.Warn("TLS certificate verification is off: anyone on the network path can read and change the traffic",
		"flag", "--"+flag, "urls", urls)
}

// connectRedis opens the feed's Redis and checks it before anything is
// written: reachable, a Redis server, the database exists, and the feed's
// keys that exist have the feed's types.
func connectRedis(ctx context.Context, rawURL string, keys redisx.Keys) (redis.UniversalClient, error) {
	rdb, err := redisx.NewClient(rawURL)
	if err != nil {
		return nil, usageError{fmt.Errorf("--redis: %w", err)}
	}
	if err := redisx.Check(ctx, rdb, rawURL); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("--redis: %w", err)
	}
	if err := redisx.CheckKeyTypes(ctx, rdb, keys); err != nil {
		rdb.Close()
		var wt *redisx.WrongTypeError
		if errors.As(err, &wt) {
			return nil, fmt.Errorf("feed %q: key %s in %s is a %s, not a %s: it is not this feed's; use another --feed (or Redis database), or delete the key if nothing needs it (es-changefeed leaves it alone)",
				keys.Feed(), wt.Key, redisx.Redact(rawURL), wt.Type, wt.Want)
		}
		return nil, err
	}
	return rdb, nil
}

// explainES turns a failed startup call to a cluster into one line a user
// can act on. flag is the URL flag ("es" or "bulk-es"); tlsPrefix the
// prefix of its TLS and credential flags ("es" or "bulk").
func explainES(err error, flag, tlsPrefix, user string) error {
	var ee *es.Error
	var te *es.TLSError
	switch {
	case errors.As(err, &te):
		switch te.Problem {
		case es.TLSUntrusted:
			return fmt.Errorf("%v: pass --%s-ca-cert FILE with the PEM of the CA that signed it (Elasticsearch 8+: config/certs/http_ca.crt), or --%s-insecure to skip verification",
				err, tlsPrefix, tlsPrefix)
		case es.TLSNotTLS:
			return fmt.Errorf("%v: use http:// in --%s, or enable TLS on the cluster", err, flag)
		case es.TLSRequired:
			return fmt.Errorf("%v: use https:// in --%s (with --%s-ca-cert if its certificate is self-signed)", err, flag, tlsPrefix)
		}
		return fmt.Errorf("%v: check --%s", err, flag)
	case errors.Is(err, es.ErrUnauthorized):
		who := "no credentials"
		if user != "" {
			who = fmt.Sprintf("user %q", user)
		}
		if errors.As(err, &ee) && ee.Status == http.StatusForbidden {
			return fmt.Errorf("Elasticsearch/OpenSearch denied %s (%v): grant it the privileges the README lists, or check --%s-user/--%s-password",
				who, err, tlsPrefix, tlsPrefix)
		}
		return fmt.Errorf("Elasticsearch/OpenSearch refused %s (%v): check --%s-user/--%s-password", who, err, tlsPrefix, tlsPrefix)
	case errors.Is(err, es.ErrNotFound):
		return fmt.Errorf("%v: check --index (the indices must exist)", err)
	case errors.As(err, &ee) && ee.Status == 0:
		return fmt.Errorf("cannot reach Elasticsearch: %v: check --%s", err, flag)
	}
	return err
}
