package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/cmdflags"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/bootstrap"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/sink"
)

// bootstrapFlags are the flags of consume --bootstrap's copy: the source
// cluster (--es with the TLS and credential flags of run), what to copy,
// and how. --bootstrap itself is consume's.
func bootstrapFlags() []cli.Flag {
	flags := []cli.Flag{
		cmdflags.EsFlag("--bootstrap: the source cluster's URL (repeat for several nodes)"),
		&cli.StringSliceFlag{Name: "index", Usage: "--bootstrap: index expressions to copy, as run's --index (default: those the feed recorded for its indices)", Sources: cli.EnvVars("ESCF_INDEX")},
		&cli.BoolFlag{Name: "hidden", Usage: "--bootstrap: let wildcards of --index match hidden indices too, as run's --hidden", Sources: cli.EnvVars("ESCF_HIDDEN")},
		&cli.IntFlag{Name: "bootstrap-page-size", Value: bootstrap.DefaultPageSize, Usage: "--bootstrap: documents per listing page (1..10000)", Sources: cli.EnvVars("ESCF_BOOTSTRAP_PAGE_SIZE")},
		&cli.IntFlag{Name: "bootstrap-workers", Value: bootstrap.DefaultWorkers, Usage: "--bootstrap: most documents handed to the sink at once", Sources: cli.EnvVars("ESCF_BOOTSTRAP_WORKERS")},
		&cli.StringFlag{Name: "bootstrap-listing", Value: "auto", Usage: "--bootstrap: how a shard is read: auto, pit or scroll", Sources: cli.EnvVars("ESCF_BOOTSTRAP_LISTING")},
		&cli.BoolFlag{Name: "bootstrap-skip-closed", Usage: "--bootstrap: copy the other indices when one the feed follows is closed (its documents are then missing)", Sources: cli.EnvVars("ESCF_BOOTSTRAP_SKIP_CLOSED")},
		&cli.BoolFlag{Name: "bootstrap-reconcile", Value: true, Usage: "--bootstrap with --sink bulk: delete what the mirror holds that the source no longer has (=false: keep it)", Sources: cli.EnvVars("ESCF_BOOTSTRAP_RECONCILE")},
	}
	return append(flags, cmdflags.ClusterFlags("es", "ESCF_ES", "the source cluster")...)
}

// runBootstrapCopy copies every current document of the feed's indices
// from the source cluster the --es flags name through handler (package
// bootstrap): after the caller recorded the stream position, before it
// moves its group there. s is the sink behind handler: when it holds
// documents itself (sink.Reconciler: the bulk mirror) and
// --bootstrap-reconcile is on, what it holds that the source lacks gets
// deletes. On a terminal stderr shows a progress bar, elsewhere progress
// lines are logged.
func runBootstrapCopy(ctx context.Context, cmd *cli.Command, feed string, rdb redis.UniversalClient,
	handler func(context.Context, redisx.Event) error, s sink.Sink) (bootstrap.Result, error) {
	run, err := prepareBootstrapCopy(ctx, cmd, feed, rdb, handler, s)
	if err != nil {
		return bootstrap.Result{}, err
	}
	return run(ctx)
}

// prepareBootstrapCopy checks the copy's flags and connects to the source
// cluster: everything that can refuse the copy before the caller records
// the stream's position. The returned function runs the copy.
func prepareBootstrapCopy(ctx context.Context, cmd *cli.Command, feed string, rdb redis.UniversalClient,
	handler func(context.Context, redisx.Event) error, s sink.Sink) (func(context.Context) (bootstrap.Result, error), error) {
	log, err := newLogger(cmd, cmd.Root().ErrWriter)
	if err != nil {
		return nil, err
	}
	urls := cmdflags.EsURLs(cmd)
	if len(urls) == 0 {
		return nil, usagef("--bootstrap needs --es <the source cluster's URL>: the documents are copied from it")
	}
	if err := (es.Config{URLs: urls}).Validate(); err != nil {
		return nil, usagef("--es: %v", err)
	}
	ecfg, err := cmdflags.ClusterConn(cmd, "es", urls)
	if err != nil {
		return nil, err
	}
	listing := cmd.String("bootstrap-listing")
	switch listing {
	case "auto":
		listing = es.ListingAuto
	case es.ListingPIT, es.ListingScroll:
	default:
		return nil, usagef("--bootstrap-listing %q: want auto, pit or scroll", listing)
	}
	if n := cmd.Int("bootstrap-page-size"); n < 1 || n > 10000 {
		return nil, usagef("--bootstrap-page-size %d: want 1..10000", n)
	}
	if n := cmd.Int("bootstrap-workers"); n < 1 {
		return nil, usagef("--bootstrap-workers %d: want at least 1", n)
	}
	var rec sink.Reconciler
	if r, ok := unwrapSink(s).(sink.Reconciler); ok && cmd.Bool("bootstrap-reconcile") {
		if err := r.Reconcilable(); err != nil {
			return nil, usagef("--bootstrap: %v: pass --bootstrap-reconcile=false to keep what the mirror holds, or use {index} in --bulk-index", err)
		}
		rec = r
	}
	client, err := cmdflags.ConnectCluster(ctx, ecfg, "es", "es", "bootstrap: ", true, log)
	if err != nil {
		return nil, err
	}
	// cli splits slice values at commas; joined again, SplitTargets keeps
	// an exclusion with the pattern before it ("logs-*,-logs-debug*").
	var targets []string
	if vals := cmd.StringSlice("index"); len(vals) > 0 {
		targets = relay.SplitTargets([]string{strings.Join(vals, ",")})
	}
	cfg := bootstrap.Config{ES: client, Redis: rdb, Feed: feed, Targets: targets, Hidden: cmd.Bool("hidden"),
		SkipClosed: cmd.Bool("bootstrap-skip-closed"), Handler: handler, Reconciler: rec,
		PageSize: cmd.Int("bootstrap-page-size"), Workers: cmd.Int("bootstrap-workers"), Listing: listing, Logger: log}
	if bar := progressBar(cmd.Root().ErrWriter, "bootstrap copy"); bar != nil {
		cfg.Progress, cfg.ProgressInterval = bar, -1 // the bar says it; no lines in between
	}
	return func(ctx context.Context) (bootstrap.Result, error) {
		res, err := bootstrap.Copy(ctx, cfg)
		if err != nil {
			return res, fmt.Errorf("consume --bootstrap: %w", err)
		}
		var removed int64
		for _, n := range res.Removed {
			removed += n
		}
		log.Info("bootstrap: copied", logkey.Documents, res.Total(), logkey.Indices, len(res.Documents), logkey.Removed, removed,
			logkey.Skipped, len(res.Skipped), logkey.Took, res.Duration.Round(time.Millisecond).String())
		return res, nil
	}, nil
}
