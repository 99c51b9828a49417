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
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"
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
		Flags:    []cli.Flag{versionFlag()},
		Action:   rootAction,
		Commands: []*cli.Command{runCommand(), resyncCommand(), consumeCommand(), statusCommand(), demoCommand(), versionCommand()},
	}
	err := app.Run(ctx, args)
	if err == nil {
		return exitOK
	}
	err = explain(err)
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

func shareOfTime(name string) func(float64) error {
	return func(v float64) error {
		if !(v > 0 && v <= 1) {
			return usagef("--%s %g: want a share of wall time, 0 < share <= 1 (such as 0.1)", name, v)
		}
		return nil
	}
}

func nonNegativeDuration(name string) func(time.Duration) error {
	return func(d time.Duration) error {
		if d < 0 {
			return usagef("--%s %s: want 0 or a positive duration such as 1s", name, d)
		}
		return nil
	}
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
