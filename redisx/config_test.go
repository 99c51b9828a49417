package redisx_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/tlsx"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

func readFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// check builds a client from cfg and runs Check on it.
func check(tb testing.TB, cfg redisx.ClientConfig) error {
	tb.Helper()
	rdb, err := redisx.NewClientWithConfig(cfg)
	if err != nil {
		return err
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return redisx.Check(ctx, rdb, cfg)
}

func TestClientConfig_TLS(t *testing.T) {
	srv := redistest.StartTLS(t, redistest.TLSOptions{AuthClients: "yes"})
	ca, cert, key := readFile(t, srv.TLS.CA), readFile(t, srv.TLS.ClientCert), readFile(t, srv.TLS.ClientKey)
	other := redistest.NewCA(t, "someone-else")
	otherCert, otherKey := other.Issue(t, "stranger")
	tests := []struct {
		name string
		cfg  redisx.ClientConfig
		want tlsx.Problem // 0: PING works
		text string       // in the message
	}{
		{name: "CA and client certificate", cfg: redisx.ClientConfig{URL: srv.URL(), CACertPEM: ca, ClientCertPEM: cert, ClientKeyPEM: key}},
		{name: "insecure with client certificate", cfg: redisx.ClientConfig{URL: srv.URL(), InsecureSkipVerify: true, ClientCertPEM: cert, ClientKeyPEM: key}},
		{name: "system roots do not know the CA", cfg: redisx.ClientConfig{URL: srv.URL(), ClientCertPEM: cert, ClientKeyPEM: key},
			want: tlsx.Untrusted, text: "is not trusted: the certificate is signed by"},
		{name: "wrong CA", cfg: redisx.ClientConfig{URL: srv.URL(), CACertPEM: other.CertPEM, ClientCertPEM: cert, ClientKeyPEM: key},
			want: tlsx.Untrusted, text: "is not trusted"},
		{name: "no client certificate", cfg: redisx.ClientConfig{URL: srv.URL(), CACertPEM: ca},
			want: tlsx.ClientCertRejected, text: "refused the TLS handshake: the server requires a client certificate and none is configured"},
		{name: "client certificate of another CA", cfg: redisx.ClientConfig{URL: srv.URL(), CACertPEM: ca, ClientCertPEM: otherCert, ClientKeyPEM: otherKey},
			want: tlsx.ClientCertRejected, text: "refused the TLS handshake"},
		{name: "plain redis:// to a TLS port", cfg: redisx.ClientConfig{URL: strings.Replace(srv.URL(), "rediss://", "redis://", 1)},
			want: tlsx.Required, text: "closed the connection without an answer, and it speaks TLS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := check(t, tt.cfg)
			var te *tlsx.Error
			switch {
			case tt.want == 0 && err != nil:
				t.Fatalf("Check: %v", err)
			case tt.want != 0 && (!errors.As(err, &te) || te.Problem != tt.want):
				t.Fatalf("Check err = %v, want a *tlsx.Error of problem %v", err, tt.want)
			case tt.want != 0 && !strings.Contains(err.Error(), tt.text):
				t.Fatalf("Check err = %v, want it to say %q", err, tt.text)
			}
			if err != nil {
				t.Logf("%v", err)
			}
		})
	}
}

func TestClientConfig_PasswordAndACLUser(t *testing.T) {
	srv := redistest.Start(t)
	const secret = "Zq7-very-secret-pw"
	srv.SetUser(t, "app", secret, "~*", "+@all")
	tests := []struct {
		name string
		cfg  redisx.ClientConfig
		ok   bool
	}{
		{"user and password in the URL", redisx.ClientConfig{URL: srv.UserURL("app", secret)}, true},
		{"Password replaces the URL's", redisx.ClientConfig{URL: srv.UserURL("app", "wrong-in-url"), Password: secret}, true},
		{"Password with a user-only URL", redisx.ClientConfig{URL: "redis://app@" + srv.Addr + "/0", Password: secret}, true},
		{"wrong password", redisx.ClientConfig{URL: srv.UserURL("app", "Wr0ng-"+secret)}, false},
		{"wrong Password replaces a right one", redisx.ClientConfig{URL: srv.UserURL("app", secret), Password: "Wr0ng-" + secret}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := check(t, tt.cfg)
			if tt.ok {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if !errors.Is(err, redisx.ErrAuth) {
				t.Fatalf("Check err = %v, want ErrAuth", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}

func TestClientConfig_Validate(t *testing.T) {
	pem := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	tests := []struct {
		name string
		cfg  redisx.ClientConfig
		want string
	}{
		{"CA with redis://", redisx.ClientConfig{URL: "redis://h:1/0", CACertPEM: pem}, "not TLS"},
		{"insecure with redis://", redisx.ClientConfig{URL: "redis://h:1/0", InsecureSkipVerify: true}, "not TLS"},
		{"CA and insecure", redisx.ClientConfig{URL: "rediss://h:1/0", CACertPEM: pem, InsecureSkipVerify: true}, "contradict"},
		{"cert without key", redisx.ClientConfig{URL: "rediss://h:1/0", ClientCertPEM: pem}, "both"},
		{"CA that is no PEM", redisx.ClientConfig{URL: "rediss://h:1/0", CACertPEM: []byte("hello")}, "no PEM certificate"},
		{"sentinel without master", redisx.ClientConfig{URL: "redis-sentinel://h:26379"}, "no master name"},
		{"sentinel bad address", redisx.ClientConfig{URL: "redis-sentinel://h:26379,h2/m"}, "bad Redis URL"},
		{"sentinel bad db", redisx.ClientConfig{URL: "redis-sentinel://h:26379/m/x"}, "not a number"},
		{"master named twice", redisx.ClientConfig{URL: "redis-sentinel://h:26379/m", SentinelMaster: "m"}, "named twice"},
		{"unknown scheme", redisx.ClientConfig{URL: "sentinel://u:pw123456@h:1/m"}, "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error with %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "pw123456") {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
	for _, ok := range []redisx.ClientConfig{
		{URL: "redis-sentinel://u:p@h1:26379,h2:26379/mymaster/2"},
		{URL: "rediss-sentinel://h1:26379/mymaster"},
		{URL: "redis://h1:26379/3", SentinelMaster: "mymaster"},
		{URL: "rediss://h:1/0", InsecureSkipVerify: true},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", ok, err)
		}
	}
}

func TestPermissionHook(t *testing.T) {
	srv := redistest.Start(t)
	srv.SetUser(t, "narrow", "pw", "~escf:*", "-@all", "+ping", "+xlen", "+multi", "+exec")
	rdb, err := redisx.NewClient(srv.UserURL("narrow", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	var got []*redisx.PermissionError
	rdb.AddHook(redisx.PermissionHook(func(pe *redisx.PermissionError) { got = append(got, pe) }))
	ctx := context.Background()
	if err := rdb.XLen(ctx, "escf:{f}:events").Err(); err != nil {
		t.Fatalf("XLEN allowed by the ACL: %v", err)
	}
	err = rdb.XAdd(ctx, &redis.XAddArgs{Stream: "escf:{f}:events", Values: []any{"a", "1"}}).Err()
	if !redisx.IsNoPerm(err) {
		t.Fatalf("XADD err = %v, want NOPERM", err)
	}
	_, _ = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XLen(ctx, "escf:{f}:events")
		p.HSet(ctx, "escf:{f}:meta", "a", "b")
		return nil
	})
	_ = rdb.XLen(ctx, "other:key").Err()
	srv.ACL(t, "SETUSER", "narrow", "+evalsha", "+eval", "+get")
	script := redis.NewScript(`return redis.call('PEXPIRE', KEYS[1], 100)`)
	if err := script.Run(ctx, rdb, []string{"escf:{f}:lease"}).Err(); !redisx.IsNoPerm(err) {
		t.Fatalf("a script calling a denied command: err = %v, want IsNoPerm", err)
	}
	want := []struct{ cmd, key string }{{"xadd", "escf:{f}:events"}, {"hset", ""}, {"xlen", "other:key"}, {"eval", "escf:{f}:lease"}}
	var names []string
	for _, pe := range got {
		names = append(names, pe.Command+" "+pe.Key)
	}
	t.Logf("denials: %q", names)
	for _, w := range want {
		found := false
		for _, pe := range got {
			found = found || (pe.Command == w.cmd && pe.Key == w.key)
		}
		if !found {
			t.Errorf("no denial of %s %s reported (got %q)", w.cmd, w.key, names)
		}
	}
	if last := got[len(got)-1]; !last.InScript || !strings.Contains(last.Error(), "Lua script of command EVAL on key escf:{f}:lease") {
		t.Errorf("script denial = %v, want InScript naming EVAL (the script was not cached) and the key", last)
	}
	if len(got) != len(want) {
		t.Errorf("%d denials reported, want %d", len(got), len(want))
	}
	if !errors.Is(got[0], redisx.ErrNoPermission) {
		t.Errorf("PermissionError is not ErrNoPermission")
	}
}

// TestSentinel_Failover: a client from a redis-sentinel:// URL writes to the
// master; the master is killed; the sentinel promotes the replica and the
// same client writes on to it.
func TestSentinel_Failover(t *testing.T) {
	st := redistest.StartSentinels(t, 1)
	rdb, err := redisx.NewClient(st.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx := context.Background()
	cfg := redisx.ClientConfig{URL: st.URL()}
	if err := redisx.Check(ctx, rdb, cfg); err != nil {
		t.Fatalf("Check: %v", err)
	}
	// The same master through SentinelMaster and a redis:// URL of a sentinel.
	byFlag := redisx.ClientConfig{URL: "redis://" + st.Addrs[0] + "/0", SentinelMaster: st.Name}
	if err := check(t, byFlag); err != nil {
		t.Fatalf("Check with SentinelMaster: %v", err)
	}
	if err := check(t, redisx.ClientConfig{URL: "redis://" + st.Addrs[0] + "/0", SentinelMaster: "no-such-master"}); err == nil ||
		!strings.Contains(err.Error(), "no-such-master") {
		t.Fatalf("Check with an unknown master = %v, want an error naming it", err)
	}
	if err := rdb.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := st.MasterAddr(t); got != st.Master.Addr {
		t.Fatalf("master is %s, want %s", got, st.Master.Addr)
	}
	// Let the write reach the replica, then kill the master.
	deadline := time.Now().Add(5 * time.Second)
	for st.Replica.Client(t).Get(ctx, "k").Val() != "before" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	st.Master.Stop()
	start := time.Now()
	var werr error
	for time.Since(start) < 20*time.Second {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		werr = rdb.Set(cctx, "k", "after", 0).Err()
		cancel()
		if werr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if werr != nil {
		t.Fatalf("no write through the sentinel within 20s of killing the master: %v\n%s", werr, st.Log())
	}
	t.Logf("writes resumed %s after the master was killed", time.Since(start).Round(time.Millisecond))
	if got := st.MasterAddr(t); got != st.Replica.Addr {
		t.Fatalf("master is %s, want the former replica %s", got, st.Replica.Addr)
	}
	if v := st.Replica.Client(t).Get(ctx, "k").Val(); v != "after" {
		t.Fatalf("the new master holds %q, want \"after\"", v)
	}
}
