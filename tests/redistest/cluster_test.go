package redistest

import (
	"context"
	"testing"
	"time"
)

func TestCluster_KillMaster(t *testing.T) {
	c := StartCluster(t, ClusterOptions{Replicas: 1})
	ctx := context.Background()
	cc := c.Client(t)
	const key = "escf:{t}:k"
	if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := c.MasterOf(t, key)
	if got := c.ReplicaOf(t, old); got == nil {
		t.Fatalf("master %s has no replica", old.Addr)
	}
	if err := cc.Wait(ctx, 1, 0).Err(); err != nil {
		t.Logf("WAIT through the cluster client: %v", err)
	}
	killed, promoted := c.KillMaster(t, key)
	if killed != old || promoted == old {
		t.Fatalf("killed %s, promoted %s; the master was %s", killed.Addr, promoted.Addr, old.Addr)
	}
	if got := c.MasterOf(t, key); got != promoted {
		t.Fatalf("MasterOf = %s after the failover, want %s", got.Addr, promoted.Addr)
	}
	// The client finds the new master when it reads the slot map again
	// (every second while used).
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = cc.Set(ctx, key, "w", 0).Err(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("SET 5s after the failover: %v", err)
	}
}

func TestCluster_Failover(t *testing.T) {
	c := StartCluster(t, ClusterOptions{Replicas: 1})
	const key = "escf:{t}:k"
	old := c.MasterOf(t, key)
	if got := c.Failover(t, key); got == old {
		t.Fatalf("Failover kept %s as master", old.Addr)
	}
	if err := c.Client(t).Set(context.Background(), key, "v", 0).Err(); err != nil {
		t.Fatalf("SET after the failover: %v", err)
	}
}
