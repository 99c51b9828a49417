package main

import (
	"context"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/internal/demo"
)

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "run an emulated cluster, an embedded Redis, a writer, the relay (with --deletes) and a reader in-process; print each event",
		Flags: append([]cli.Flag{
			&cli.DurationFlag{Name: "duration", Value: demo.DefaultDuration, Usage: "how long the writer writes", Validator: positiveDuration("duration")},
			&cli.StringFlag{Name: "flavor", Value: demo.DefaultFlavor, Usage: "emulated engine: " + strings.Join(demo.Flavors(), ", ")},
			metricsFlag(),
		}, demoLogFlags()...),
		Action: demoAction,
	}
}

func demoAction(ctx context.Context, cmd *cli.Command) error {
	log, err := newLogger(cmd, cmd.Root().ErrWriter)
	if err != nil {
		return err
	}
	reg, err := newRegistry()
	if err != nil {
		return err
	}
	addr := cmd.String("metrics-addr")
	cfg := demo.Config{Flavor: cmd.String("flavor"), Duration: cmd.Duration("duration"),
		Stdout: cmd.Root().Writer, Stderr: cmd.Root().ErrWriter, Metrics: reg, Logger: log,
		Serve: func(ctx context.Context, o demo.Ops) error {
			return serveOps(ctx, addr, reg, o.Redis, o.Keys, o.ES, o.Health, o.Ready, log)
		}}
	// --duration's validator refused a bad duration: only --flavor is left.
	if err := cfg.Validate(); err != nil {
		return usagef("--flavor %q: want one of %s", cfg.Flavor, strings.Join(demo.Flavors(), ", "))
	}
	return demo.Run(ctx, cfg)
}

// demoLogFlags are logFlags at level warn: the demo says in a few lines of
// its own what runs where; --log-level info shows the relay's log too.
func demoLogFlags() []cli.Flag {
	flags := logFlags()
	for _, f := range flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == "log-level" {
			sf.Value = "warn"
		}
	}
	return flags
}
