package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/cmdflags"

	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/status"
)

// errUnhealthy makes status exit 1 after printing its report.
var errUnhealthy = errors.New("the feed is unhealthy")

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "print the feed's state (checkpoints vs global checkpoints, stream, groups, lease, dead letters); exit 1 if unhealthy",
		Flags: append([]cli.Flag{
			cmdflags.FeedFlag(),
			cmdflags.EsFlag("cluster URL, to show each shard's global checkpoint and lag (optional)"),
			&cli.Int64Flag{Name: "max-lag", Value: status.DefaultMaxLag, Usage: "unhealthy above this lag (shard operations or group entries)", Sources: cli.EnvVars("ESCF_MAX_LAG")},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			cmdflags.ReadPartitionsFlag(),
		}, append(cmdflags.ClusterFlags("es", "ESCF_ES", "the cluster"), cmdflags.RedisFlags("redis", "ESCF_REDIS", "the feed's Redis", redisx.DefaultURL)...)...),
		Action: statusAction,
	}
}

// statusAction runs status. With --json stdout is JSON whatever happens:
// the report, or, when there is none (a bad flag, Redis unreachable), an
// object with the feed, healthy false and the error; the error also goes
// to stderr and sets the exit code, as without --json.
func statusAction(ctx context.Context, cmd *cli.Command) (err error) {
	defer func() {
		if err != nil && cmd.Bool("json") && !errors.Is(err, errUnhealthy) {
			enc := json.NewEncoder(cmd.Root().Writer)
			enc.SetIndent("", "  ")
			_ = enc.Encode(struct {
				Feed    string `json:"feed"`
				Healthy bool   `json:"healthy"`
				Error   string `json:"error"`
			}{cmd.String("feed"), false, cmdflags.Explain(err).Error()})
		}
	}()
	feed := cmd.String("feed")
	if err := cmdflags.CheckFeed(feed); err != nil {
		return err
	}
	urls := cmdflags.EsURLs(cmd)
	ecfg, err := cmdflags.ClusterConn(cmd, "es", urls)
	if err != nil {
		return err
	}
	rcfg, err := cmdflags.RedisConfig(cmd, "redis")
	if err != nil {
		return err
	}
	if err := cmdflags.CheckPartitionsFlag(cmd); err != nil {
		return err
	}
	keys := redisx.NewKeys(feed)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rdb, err := cmdflags.ConnectRedis(ctx, rcfg, keys, slog.New(slog.NewTextHandler(cmd.Root().ErrWriter, nil)), nil)
	if err != nil {
		return err
	}
	defer rdb.Close()
	src := status.Sources{Redis: rdb, Keys: keys, MaxLag: cmd.Int64("max-lag")}
	if len(urls) > 0 {
		ecfg.RequestTimeout = 10 * time.Second
		client, err := es.New(ecfg)
		if err != nil {
			return usageError{Err: fmt.Errorf("--es: %w", err)}
		}
		if ecfg.InsecureSkipVerify {
			cmdflags.WarnInsecure(slog.New(slog.NewTextHandler(cmd.Root().ErrWriter, nil)), "es-insecure", client.URLs())
		}
		src.ES = client
	} else {
		for _, f := range cmdflags.UsedClusterFlags(cmd, "es") {
			return usagef("--%s needs --es: add --es <cluster URL>, or drop --%s", f, f)
		}
	}
	// A feed no relay has written to is reported as such, with the feeds
	// the Redis does hold, before anything else is read of it.
	lookIn := 1
	if cmd.IsSet("partitions") {
		lookIn = cmd.Int("partitions")
	}
	if _, err := redisx.FindFeed(ctx, rdb, feed, lookIn); err != nil {
		var nf *redisx.FeedNotFoundError
		if !errors.As(err, &nf) {
			return cmdflags.ExplainRedis(err, "redis", rcfg)
		}
		rep := status.GatherAbsent(ctx, rdb, feed, explainNoFeed(nf, rcfg.Redacted(), -1, false))
		if err := printReport(cmd, rep, rep.Healthy, len(rep.Problems)); !errors.Is(err, errUnhealthy) {
			return err
		}
		return fmt.Errorf("%w: feed %s does not exist in %s", errUnhealthy, feed, rcfg.Redacted())
	}
	// The partition record is read with HGETALL, which status's ACL has.
	meta, err := checkpoint.ReadMeta(ctx, rdb, keys)
	if err != nil {
		return cmdflags.ExplainRedis(err, "redis", rcfg)
	}
	rec, err := redisx.ParsePartitionRecord(feed, meta)
	if err != nil {
		return err
	}
	partitions, err := choosePartitions(cmd, rec, feed, nil)
	if err != nil {
		return err
	}
	if partitions > 1 {
		return statusPartitions(ctx, cmd, src, partitions, rcfg)
	}
	rep, err := status.Gather(ctx, src)
	if err != nil {
		return cmdflags.ExplainRedis(err, "redis", rcfg)
	}
	return printReport(cmd, rep, rep.Healthy, len(rep.Problems))
}

// printReport writes a status report as indented JSON (--json) or as text,
// and returns errUnhealthy when the report is not healthy.
func printReport(cmd *cli.Command, rep interface{ WriteText(io.Writer) error }, healthy bool, problems int) error {
	out := cmd.Root().Writer
	if cmd.Bool("json") {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := rep.WriteText(out); err != nil {
		return err
	}
	if !healthy {
		return fmt.Errorf("%w: %d problem(s)", errUnhealthy, problems)
	}
	return nil
}

// statusPartitions prints the report of a feed split in partitions; the
// exit code follows its health, as for one partition.
func statusPartitions(ctx context.Context, cmd *cli.Command, src status.Sources, partitions int, rcfg redisx.ClientConfig) error {
	rep, err := status.GatherPartitions(ctx, src, partitions)
	if err != nil {
		return cmdflags.ExplainRedis(err, "redis", rcfg)
	}
	return printReport(cmd, rep, rep.Healthy, len(rep.Problems))
}
