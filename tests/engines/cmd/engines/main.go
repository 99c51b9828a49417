// Command engines runs a cluster of real Elasticsearch or OpenSearch nodes
// from Maven Central's jars, one JVM per node, on 127.0.0.1:
//
//	go run ./tests/engines/cmd/engines --engine opensearch-2 --nodes 1 --http-port 9200
//
// It prints "ready http://127.0.0.1:<port>" (node 0's URL) when the cluster
// is green, and runs until SIGINT or SIGTERM, or until the process that
// started it ends (kill %1 on `go run … &` ends go run, which passes no
// SIGTERM on), then stops every JVM it started. With --security DIR the
// cluster runs with TLS and users, and DIR receives the CA, the users'
// passwords and a client certificate; on elasticsearch-7 (no security
// plugin on Maven Central) a TLS proxy, haproxy, serves --http-port in
// front of a plain node, which tests the client only: the ready line says
// so ("TLS proxy (client only): roles are not enforced"). The first run of
// an engine downloads its jars into ~/.m2.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/es-changefeed/es-changefeed/tests/engines"
)

type settings map[string]string

func (s settings) String() string { return fmt.Sprint(map[string]string(s)) }

func (s settings) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want key=value", v)
	}
	s[k] = val
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "engines:", err)
		os.Exit(1)
	}
}

func run() error {
	extra := settings{}
	engine := flag.String("engine", engines.DefaultEngine, "engine: "+strings.Join(engines.Names(), ", "))
	nodes := flag.Int("nodes", engines.DefaultNodes, "number of nodes (one JVM each)")
	port := flag.Int("http-port", 9200, "node 0's HTTP port; node i listens on port+i (0: free ports)")
	heap := flag.String("heap", engines.DefaultHeap, "heap of each JVM")
	dir := flag.String("dir", "", "directory for the nodes' data and logs (default: a temporary one, removed at exit)")
	javaOpts := flag.String("java-opts", strings.Join(engines.DefaultJavaOpts, " "), "JVM options of each node, space-separated (\"\": the JVM's defaults)")
	security := flag.String("security", "", "start the cluster secured (HTTPS, transport TLS, users, roles) and write the CA, passwords, client certificate and API key into this directory (elasticsearch-7: behind a TLS proxy, which tests the client only: no roles, no API key)")
	list := flag.Bool("list", false, "print the pinned engines and exit")
	flag.Var(extra, "setting", "extra node setting key=value (repeatable)")
	flag.Parse()
	if *list {
		for _, e := range engines.All() {
			fmt.Printf("%-16s %s %s (Java %d+)\n", e.Name, e.Display(), e.Version, e.Java)
		}
		return nil
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, orphaned := context.WithCancel(ctx)
	defer orphaned()
	go stopWhenOrphaned(ctx, orphaned)
	fmt.Fprintf(os.Stderr, "engines: starting %d node(s) of %s (the first run downloads its jars)\n", *nodes, *engine)
	c, err := engines.Start(ctx, engines.Config{Engine: *engine, Nodes: *nodes, HTTPPort: *port, Heap: *heap, Dir: *dir, Settings: extra,
		JavaOpts: strings.Fields(*javaOpts), Security: *security})
	if err != nil {
		return err
	}
	for i := 0; i < c.Nodes(); i++ {
		fmt.Fprintf(os.Stderr, "engines: %s at %s, log %s\n", c.NodeName(i), c.NodeURL(i), c.LogFile(i))
	}
	if c.Secured() {
		files := []string{engines.FileCA, engines.FileClientCert, engines.FileClientKey}
		for _, u := range engines.Users() {
			files = append(files, engines.PasswordFile(u))
		}
		if _, err := os.Stat(filepath.Join(c.SecurityDir(), engines.FileAPIKey)); err == nil {
			files = append(files, engines.FileAPIKey)
		}
		fmt.Fprintf(os.Stderr, "engines: secured by %s; in %s: %s (users %s)\n", c.SecurityKind(), c.SecurityDir(), strings.Join(files, ", "),
			strings.Join(engines.Users(), ", "))
	}
	if c.SecurityKind() == engines.TLSProxy {
		fmt.Fprintf(os.Stderr, "engines: TLS proxy (haproxy) log %s\n", c.ProxyLog())
		// The URL first, for scripts that read it.
		fmt.Printf("ready %s %s\n", c.URL(), c.SecurityKind())
	} else {
		fmt.Printf("ready %s\n", c.URL())
	}
	<-ctx.Done()
	stop()
	fmt.Fprintln(os.Stderr, "engines: stopping")
	return c.Close()
}

// stopWhenOrphaned calls stop once this process's parent has gone (it is
// then reparented, and its parent pid changes).
func stopWhenOrphaned(ctx context.Context, stop func()) {
	parent := os.Getppid()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if os.Getppid() != parent {
				fmt.Fprintln(os.Stderr, "engines: the process that started me has ended")
				stop()
				return
			}
		}
	}
}
