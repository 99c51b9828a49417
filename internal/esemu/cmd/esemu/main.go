// Command esemu serves an emulated Elasticsearch/OpenSearch cluster until
// SIGINT or SIGTERM:
//
//	go run ./internal/esemu/cmd/esemu --addr 127.0.0.1:9200 --flavor elasticsearch-9 --nodes 3
//
// Its controls (node kills, faults, holds) are under /_esemu/; see
// internal/esemu/README.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
)

type pairs map[string]string

func (p pairs) String() string { return fmt.Sprint(map[string]string(p)) }

func (p pairs) Set(v string) error {
	k, val, ok := strings.Cut(v, ":")
	if !ok || k == "" {
		return fmt.Errorf("%q: want name:secret", v)
	}
	p[k] = val
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "esemu:", err)
		os.Exit(1)
	}
}

func run() error {
	users, keys := pairs{}, pairs{}
	addr := flag.String("addr", "127.0.0.1:9200", "listen address")
	flavor := flag.String("flavor", string(esemu.DefaultFlavor), "engine line to answer as: "+flavorList())
	nodes := flag.Int("nodes", esemu.DefaultNodes, "number of data nodes")
	name := flag.String("cluster-name", esemu.DefaultClusterName, "cluster name")
	useTLS := flag.Bool("tls", false, "serve HTTPS with a fresh self-signed CA")
	caOut := flag.String("ca-out", "", "with --tls: write the CA certificate (PEM) to this file")
	flag.Var(users, "user", "basic auth user as name:password (repeatable)")
	flag.Var(keys, "api-key", "ES API key as id:key (repeatable)")
	ooo := flag.Bool("out-of-order", false, "complete concurrent writes out of seq-no order")
	maxDelay := flag.Duration("max-delay", esemu.DefaultMaxCompletionDelay, "with --out-of-order: longest completion delay")
	gcpSync := flag.Duration("gcp-sync-interval", esemu.DefaultGlobalCheckpointSyncInterval, "global checkpoint sync interval")
	nodeLeft := flag.Duration("node-left-delay", esemu.DefaultNodeLeftDelay, "delay before a dead node's replicas move (negative: never)")
	seed := flag.Int64("seed", 0, "random seed (0: from the clock)")
	flag.Parse()

	f, err := esemu.ParseFlavor(*flavor)
	if err != nil {
		return err
	}
	c, err := esemu.New(esemu.Config{
		Flavor: f, Nodes: *nodes, Addr: *addr, ClusterName: *name, TLS: *useTLS,
		Users: users, APIKeys: keys, OutOfOrder: *ooo, MaxCompletionDelay: *maxDelay,
		GlobalCheckpointSyncInterval: *gcpSync, NodeLeftDelay: *nodeLeft, Seed: *seed,
	})
	if err != nil {
		return err
	}
	if *caOut != "" {
		if !*useTLS {
			return fmt.Errorf("--ca-out needs --tls")
		}
		if err := os.WriteFile(*caOut, c.CACertPEM(), 0o644); err != nil {
			return fmt.Errorf("write CA to %s: %w", *caOut, err)
		}
	}
	fmt.Fprintf(os.Stderr, "esemu: %s (%s %s, %d nodes) serving at %s\n", *name, f, f.Version(), *nodes, c.URL())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	fmt.Fprintln(os.Stderr, "esemu: stopping")
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		return fmt.Errorf("close timed out")
	}
}

// flavorList names the flavors, for the usage.
func flavorList() string {
	names := make([]string, len(esemu.Flavors))
	for i, f := range esemu.Flavors {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}
