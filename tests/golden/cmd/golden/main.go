// Command golden records the golden responses the emulator is compared
// with: for each engine it starts one real node (tests/engines), runs the
// golden script (tests/golden) against it and writes one
// file per call into internal/esemu/testdata/golden/<engine>/<NN>-<name>.json.
// Re-record after changing the script or the pinned engines:
//
//	go run ./tests/golden/cmd/golden                       # all five engines
//	go run ./tests/golden/cmd/golden --engine elasticsearch-9
//
// It needs Maven and Java as tests/engines does (the first run of an engine
// downloads its jars). Each engine takes about 10 s; the old files of an
// engine are replaced only once its whole script ran. Then
// `go test ./internal/esemu/ -run TestGolden` replays the script on the
// emulator and compares.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/es-changefeed/es-changefeed/tests/engines"
	"github.com/es-changefeed/es-changefeed/tests/golden"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "golden:", err)
		os.Exit(1)
	}
}

func run() error {
	names := make([]string, len(golden.Targets))
	for i, t := range golden.Targets {
		names[i] = t.Engine
	}
	engine := flag.String("engine", "all", "engine to record: all, or one of "+strings.Join(names, ", "))
	out := flag.String("out", defaultOut(), "directory holding one directory of goldens per engine")
	flag.Parse()

	targets := golden.Targets
	if *engine != "all" {
		t, err := golden.LookupTarget(*engine)
		if err != nil {
			return err
		}
		targets = []golden.Target{t}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, t := range targets {
		if err := record(ctx, t, filepath.Join(*out, t.Engine)); err != nil {
			return fmt.Errorf("%s: %w", t.Engine, err)
		}
	}
	return nil
}

// defaultOut is internal/esemu/testdata/golden of the checkout holding this
// source file (go run keeps its path), else relative to the working
// directory.
func defaultOut() string {
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "internal", "esemu", "testdata", "golden")
		if _, err := os.Stat(filepath.Dir(dir)); err == nil {
			return filepath.Clean(dir)
		}
	}
	return filepath.Join("internal", "esemu", "testdata", "golden")
}

// start starts one node, trying again twice: tests/engines takes free ports
// before the JVM binds them, and a busy machine may take one in between.
func start(ctx context.Context, e engines.Engine) (*engines.Cluster, error) {
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		fmt.Printf("%s: starting a node\n", e)
		var c *engines.Cluster
		if c, err = engines.Start(ctx, engines.Config{Engine: e.Name}); err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			break
		}
		fmt.Printf("%s: %v\n", e, firstLine(err))
	}
	return nil, err
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

func record(ctx context.Context, t golden.Target, dir string) error {
	e, err := engines.Lookup(t.Engine)
	if err != nil {
		return err
	}
	c, err := start(ctx, e)
	if err != nil {
		return err
	}
	defer c.Close()

	steps := golden.Script(t)
	r := &golden.Runner{URL: c.URL()}
	files := make(map[string][]byte, len(steps))
	for i, s := range steps {
		call, err := r.Do(ctx, s)
		if err != nil {
			return err
		}
		f, err := golden.NewFile(e.String(), i, call)
		if err != nil {
			return err
		}
		b, err := f.Encode()
		if err != nil {
			return err
		}
		files[golden.FileName(i, s)] = b
		switch {
		case call.Skipped != "":
			fmt.Printf("  %-32s skipped: %s\n", f.Step, call.Skipped)
		case s.Unreliable != "":
			fmt.Printf("  %-32s %d (not compared: %s)\n", f.Step, call.Status, s.Unreliable)
		default:
			fmt.Printf("  %-32s %d\n", f.Step, call.Status)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	for _, o := range old {
		if err := os.Remove(o); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("%s: %d files in %s\n", e, len(files), dir)
	return nil
}
