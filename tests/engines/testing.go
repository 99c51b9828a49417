package engines

import (
	"context"
	"errors"
	"testing"
)

// StartTB starts a cluster for a test and closes it in tb.Cleanup. Missing
// Java or Maven fails the test with the command that installs them (it
// never skips). Logs of the nodes stay in tb.TempDir() until the test ends;
// a failed test prints where.
func StartTB(tb testing.TB, cfg Config) *Cluster {
	tb.Helper()
	if cfg.Dir == "" {
		cfg.Dir = tb.TempDir()
	}
	c, err := Start(context.Background(), cfg)
	if err != nil {
		if errors.Is(err, ErrNoMaven) {
			tb.Fatal(err)
		}
		tb.Fatalf("start the cluster: %v", err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			for i := 0; i < c.Nodes(); i++ {
				tb.Logf("%s of %s: %s", c.NodeName(i), c.Engine(), c.LogFile(i))
			}
			if l := c.ProxyLog(); l != "" {
				tb.Logf("the TLS proxy of %s: %s", c.Engine(), l)
			}
		}
		if err := c.Close(); err != nil {
			tb.Errorf("close the cluster: %v", err)
		}
	})
	return c
}
