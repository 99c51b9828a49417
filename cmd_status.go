package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay/es"
	"github.com/es-changefeed/es-changefeed/relay/status"
)

// errUnhealthy makes status exit 1 after printing its report.
var errUnhealthy = errors.New("the feed is unhealthy")

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "print the feed's state (checkpoints vs global checkpoints, stream, groups, lease, dead letters); exit 1 if unhealthy",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "redis", Value: "redis://localhost:6379/0", Usage: "the feed's Redis URL", Sources: cli.EnvVars("ESCF_REDIS_URL")},
			&cli.StringFlag{Name: "feed", Value: "default", Usage: "feed name", Sources: cli.EnvVars("ESCF_FEED")},
			&cli.StringSliceFlag{Name: "es", Usage: "cluster URL, to show each shard's global checkpoint and lag (optional)", Sources: cli.EnvVars("ESCF_ES_URL")},
			&cli.StringFlag{Name: "es-user", Sources: cli.EnvVars("ESCF_ES_USER")},
			&cli.StringFlag{Name: "es-password", Sources: cli.EnvVars("ESCF_ES_PASSWORD")},
			caCertFlag("es", "ESCF_ES", "the cluster"), insecureFlag("es", "ESCF_ES", "the cluster"),
			&cli.Int64Flag{Name: "max-lag", Value: status.DefaultMaxLag, Usage: "unhealthy above this lag (shard operations or group entries)", Sources: cli.EnvVars("ESCF_MAX_LAG")},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: statusAction,
	}
}

func statusAction(ctx context.Context, cmd *cli.Command) error {
	feed := cmd.String("feed")
	if err := checkFeed(feed); err != nil {
		return err
	}
	caPEM, insecure, err := clusterTLS(cmd, "es")
	if err != nil {
		return err
	}
	keys := redisx.NewKeys(feed)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rdb, err := connectRedis(ctx, cmd.String("redis"), keys)
	if err != nil {
		return err
	}
	defer rdb.Close()
	src := status.Sources{Redis: rdb, Keys: keys, MaxLag: cmd.Int64("max-lag")}
	if urls := splitList(cmd.StringSlice("es")); len(urls) > 0 {
		client, err := es.New(es.Config{URLs: urls, Username: cmd.String("es-user"), Password: cmd.String("es-password"), RequestTimeout: 10 * time.Second,
			CACertPEM: caPEM, InsecureSkipVerify: insecure})
		if err != nil {
			return usageError{fmt.Errorf("--es: %w", err)}
		}
		if insecure {
			warnInsecure(slog.New(slog.NewTextHandler(cmd.Root().ErrWriter, nil)), "es-insecure", client.URLs())
		}
		src.ES = client
	} else {
		for _, f := range []string{"es-ca-cert", "es-insecure"} {
			if cmd.IsSet(f) {
				return usagef("--%s needs --es: add --es <cluster URL>, or drop --%s", f, f)
			}
		}
	}
	rep, err := status.Gather(ctx, src)
	if err != nil {
		return err
	}
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
	if !rep.Healthy {
		return fmt.Errorf("%w: %d problem(s)", errUnhealthy, len(rep.Problems))
	}
	return nil
}
