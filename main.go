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

	"github.com/es-changefeed/es-changefeed/internal/cmdflags"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the job failed: a dependency is unreachable, refused us, or broke
	exitUsage   = 2 // bad flags or configuration
)

// usageError marks errors in what the user asked for (exit 2).
type usageError = cmdflags.UsageError

var usagef = cmdflags.Usagef

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
	// go-redis's own logger (a line per failed dial, on stderr) says
	// nothing the commands do not say better once: until a command builds
	// its logger (newLogger routes it there at debug), it says nothing.
	redis.SetLogger(redisLog{slog.New(slog.DiscardHandler)})
	app := &cli.Command{
		Name:           "es-changefeed",
		Usage:          "a change feed for Elasticsearch and OpenSearch, delivered through a Redis Stream",
		Writer:         stdout,
		ErrWriter:      stderr,
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		OnUsageError: func(_ context.Context, _ *cli.Command, err error, _ bool) error {
			return usageError{Err: err}
		},
		Flags:    []cli.Flag{versionFlag()},
		Action:   rootAction,
		Commands: []*cli.Command{runCommand(), resyncCommand(), consumeCommand(), statusCommand(), demoCommand(), versionCommand()},
	}
	for _, c := range app.Commands {
		c.OnUsageError = usageOf
	}
	err := app.Run(ctx, args)
	if err == nil {
		return exitOK
	}
	err = cmdflags.Explain(err)
	fmt.Fprintf(stderr, "es-changefeed: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || isCLIUsage(err) {
		return exitUsage
	}
	return exitFailure
}

// usageOf is every command's OnUsageError: the error once (runMain prints
// it), with the flag meant when one is close to a mistyped one, and where
// the command's help is — not the error, then the error again, then the
// whole help, as urfave/cli does by default.
func usageOf(_ context.Context, cmd *cli.Command, err error, _ bool) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		if s := cli.SuggestFlag(cmd.Flags, name, false); s != "" && editDistance(name, strings.TrimLeft(s, "-")) <= max(2, len(name)/3) {
			msg = fmt.Sprintf("unknown flag --%s: did you mean %s?", name, s)
		} else {
			msg = fmt.Sprintf("unknown flag --%s", name)
		}
	}
	return usagef("%s (es-changefeed %s --help lists its flags)", msg, cmd.Name)
}

// editDistance is the Levenshtein distance of a and b: a suggestion
// further than a typo or two away is no suggestion.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
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
