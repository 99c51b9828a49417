package redisx

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

func TestClientConfig_Cluster(t *testing.T) {
	tests := []struct {
		name, url, password string
		master              string
		wantAddrs           []string
		wantUser, wantPass  string
		wantTLS             bool
		wantErr             string // substring; "" = valid
	}{
		{name: "one node", url: "redis-cluster://127.0.0.1:7000", wantAddrs: []string{"127.0.0.1:7000"}},
		{name: "several nodes, db 0", url: "redis-cluster://u:p@h1:7000,h2:7001/0", wantAddrs: []string{"h1:7000", "h2:7001"}, wantUser: "u", wantPass: "p"},
		{name: "password flag wins", url: "redis-cluster://:p@h1:7000", password: "q", wantAddrs: []string{"h1:7000"}, wantPass: "q"},
		{name: "tls", url: "rediss-cluster://h1:7000,h2:7000", wantAddrs: []string{"h1:7000", "h2:7000"}, wantTLS: true},
		{name: "database 1", url: "redis-cluster://h1:7000/1", wantErr: "only database 0"},
		{name: "options", url: "redis-cluster://h1:7000?dial_timeout=1s", wantErr: "no options"},
		{name: "no port", url: "redis-cluster://h1:7000,h2", wantErr: `invalid port`},
		{name: "empty node", url: "redis-cluster://h1:7000,", wantErr: `invalid port`},
		{name: "sentinel master too", url: "redis-cluster://h1:7000", master: "m", wantErr: "drop the Sentinel master"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ClientConfig{URL: tt.url, Password: tt.password, SentinelMaster: tt.master}
			p, err := cfg.parse()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrBadURL) {
					t.Fatalf("parse(%s) = %v, want ErrBadURL with %q", tt.url, err, tt.wantErr)
				}
				if strings.Contains(err.Error(), ":p@") {
					t.Errorf("error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.cluster == nil || p.opt != nil || p.failover != nil {
				t.Fatalf("parse(%s): not (only) cluster options: %+v", tt.url, p)
			}
			if got, want := strings.Join(p.cluster.Addrs, ","), strings.Join(tt.wantAddrs, ","); got != want {
				t.Errorf("Addrs = %s, want %s", got, want)
			}
			if p.cluster.Username != tt.wantUser || p.cluster.Password != tt.wantPass {
				t.Errorf("user/password = %q/%q, want %q/%q", p.cluster.Username, p.cluster.Password, tt.wantUser, tt.wantPass)
			}
			if got := p.cluster.TLSConfig != nil; got != tt.wantTLS || cfg.TLS() != tt.wantTLS {
				t.Errorf("TLS = %v (TLS() %v), want %v", got, cfg.TLS(), tt.wantTLS)
			}
			if !cfg.Cluster() {
				t.Error("Cluster() = false")
			}
			if p.cluster.ClusterStateReloadInterval != DefaultClusterReloadInterval {
				t.Errorf("ClusterStateReloadInterval = %s", p.cluster.ClusterStateReloadInterval)
			}
		})
	}
}

func TestCheck_Cluster(t *testing.T) {
	ctx := context.Background()
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		cfg := ClientConfig{URL: c.URL()}
		rdb, err := NewClientWithConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		if _, ok := rdb.(*redis.ClusterClient); !ok {
			t.Fatalf("client is a %T, want *redis.ClusterClient", rdb)
		}
		if err := Check(ctx, rdb, cfg); err != nil {
			t.Fatalf("Check: %v", err)
		}
		if err := CheckKeyTypes(ctx, rdb, NewKeys("f")); err != nil {
			t.Fatalf("CheckKeyTypes: %v", err)
		}
	})
	t.Run("single server", func(t *testing.T) {
		srv := redistest.Start(t)
		cfg := ClientConfig{URL: "redis-cluster://" + srv.Addr}
		rdb, err := NewClientWithConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		err = Check(ctx, rdb, cfg)
		if !errors.Is(err, ErrNotCluster) || !strings.Contains(err.Error(), "redis://") {
			t.Fatalf("Check of a single server as a cluster: %v, want ErrNotCluster saying redis://", err)
		}
	})
	t.Run("nothing there", func(t *testing.T) {
		cfg := ClientConfig{URL: "redis-cluster://127.0.0.1:1,127.0.0.1:2"}
		rdb, err := NewClientWithConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		if err := Check(ctx, rdb, cfg); err == nil || !strings.Contains(err.Error(), "cannot reach") {
			t.Fatalf("Check of nothing: %v, want cannot reach", err)
		}
	})
}
