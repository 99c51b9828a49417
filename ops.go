package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/status"
)

func metricsFlag() cli.Flag {
	return &cli.StringFlag{Name: "metrics-addr", Usage: "serve /metrics, /healthz, /readyz and the status page (GET /) here, e.g. 127.0.0.1:9464",
		Sources: cli.EnvVars("ESCF_METRICS_ADDR")}
}

// newRegistry is the process's Prometheus registry with the Go and process
// collectors (a relay.Feed registers the feed's own).
func newRegistry() (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register the process metrics: %w", err)
		}
	}
	return reg, nil
}

// serveOps starts the metrics/status server when --metrics-addr is set; it
// stops with ctx.
func serveOps(ctx context.Context, addr string, reg *prometheus.Registry, rdb redis.UniversalClient, keys redisx.Keys,
	client *es.Client, health, ready func() (bool, string), log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	srv, err := status.NewServer(status.ServerConfig{Addr: addr, Gatherer: reg, Sources: status.Sources{Redis: rdb, Keys: keys, ES: client},
		Health: health, Ready: ready, Logger: log})
	if err != nil {
		return usagef("--metrics-addr: %w", err)
	}
	log.Info("serving metrics and the status page", logkey.Addr, "http://"+srv.Addr()+"/")
	go func() {
		if err := srv.Run(ctx); err != nil {
			log.Error("metrics server stopped", logkey.Error, err.Error())
		}
	}()
	return nil
}
