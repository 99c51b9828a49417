package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/engines"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// securedEngine starts a secured node of ESCF_TEST_ENGINE of its own
// (engines.Config.Security), stopped when the test ends, and returns it
// with its security directory. Without ESCF_TEST_ENGINE the test skips
// (TestCLI_SecuredCluster and TestCLI_SecurityErrors run the same paths on
// the emulator). elasticsearch-7, without a security plugin on Maven
// Central, runs behind a TLS proxy (engines.TLSProxy): the client's TLS and
// credentials only, no roles.
func securedEngine(tb testing.TB) (*engines.Cluster, string) {
	tb.Helper()
	name := testEngineName()
	if name == "" {
		tb.Skip("needs a real secured node: set ESCF_TEST_ENGINE (make test does, for " + engines.DefaultEngine + ")")
	}
	if engines.SecurityKindOf(name) == engines.NoSecurity {
		tb.Skipf("%s cannot start secured; the emulator's TestCLI_SecuredCluster covers the client", name)
	}
	dir := filepath.Join(tb.TempDir(), "sec")
	c := engines.StartTB(tb, engines.Config{Engine: name, Security: dir})
	tb.Logf("backend: %s secured by %s at %s, credentials in %s", c.Engine(), c.SecurityKind(), c.URL(), dir)
	return c, dir
}

// adminDo sends a request as the secured cluster's admin and fails the
// test on an error status.
func adminDo(tb testing.TB, c *engines.Cluster, method, path, body string) []byte {
	tb.Helper()
	req, err := http.NewRequest(method, c.URL()+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth(engines.UserAdmin, c.Password(engines.UserAdmin))
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		tb.Fatalf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
	return b
}

// secureIndex creates the index "secure" (2 shards) as the admin with 5
// documents, refreshed, and returns them by id.
func secureIndex(tb testing.TB, c *engines.Cluster) map[string]string {
	tb.Helper()
	adminDo(tb, c, "PUT", "/secure", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`)
	want := map[string]string{}
	for i := 0; i < 5; i++ {
		id, src := fmt.Sprintf("doc-%d", i), fmt.Sprintf(`{"n":%d}`, i)
		adminDo(tb, c, "PUT", "/secure/_doc/"+id+"?refresh=true", src)
		want[id] = src
	}
	return want
}

// adminStatus sends a request without a body as the admin and returns
// the status, whatever it is.
func adminStatus(tb testing.TB, c *engines.Cluster, method, path string) int {
	tb.Helper()
	req, err := http.NewRequest(method, c.URL()+path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.SetBasicAuth(engines.UserAdmin, c.Password(engines.UserAdmin))
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestCLI_SecuredRealEngine runs the binary against a real secured node,
// each user with exactly its role of docs/SECURITY.md: the relay (with
// --deletes: a document deleted on the cluster becomes a delete event) as
// escf-relay with a password file, with the client
// certificate alone, and with an API key where the engine has them;
// status as escf-status; the bulk sink as escf-bulk. Then the failures:
// a wrong password, no CA, plain http:// to the TLS port, and users that
// lack the relay's privileges each stop the relay with one line naming
// the cause, exit 1, nothing written to Redis. Behind the TLS proxy
// (elasticsearch-7) the users' roles are not enforced: no API key, and the
// 403 subtests skip.
func TestCLI_SecuredRealEngine(t *testing.T) {
	c, dir := securedEngine(t)
	sec := func(name string) string { return filepath.Join(dir, name) }
	want := secureIndex(t, c)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	run := func(feedName string, extra ...string) []string {
		return append([]string{"run", "--es", c.URL(), "--es-ca-cert", sec(engines.FileCA), "--redis", srv.URL(),
			"--feed", feedName, "--index", "secure", "--poll-interval", "20ms"}, extra...)
	}
	relayPW := []string{"--es-user", engines.UserRelay, "--es-password-file", sec(engines.PasswordFile(engines.UserRelay))}
	// The relay as escf-relay runs through the whole test: deletes and
	// status below are of its feed.
	relay := startBinary(t, run("real-basic", append(relayPW, "--deletes", "--delete-scan-interval", "50ms")...)...)
	waitMirrored(t, relay, srv, "real-basic", want)
	tests := []struct {
		name string
		args []string
	}{
		{"client certificate only", run("real-cert", "--es-client-cert", sec(engines.FileClientCert), "--es-client-key", sec(engines.FileClientKey))},
	}
	if c.Engine().Product == "elasticsearch" && c.SecurityKind() == engines.EngineSecurity {
		tests = append(tests, struct {
			name string
			args []string
		}{"API key file", run("real-apikey", "--es-api-key-file", sec(engines.FileAPIKey))})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startBinary(t, tt.args...)
			waitMirrored(t, p, srv, tt.args[8], want)
			if !strings.Contains(p.out.String(), `msg="connected to `) {
				t.Errorf("no line saying what the relay connected to:\n%s", p.out)
			}
		})
	}

	t.Run("deletes as the relay user", func(t *testing.T) {
		adminDo(t, c, "DELETE", "/secure/_doc/doc-0?refresh=true", "")
		stream := redisx.NewKeys("real-basic").Events()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var deleted bool
			for _, e := range entries(t, rdb, stream) {
				deleted = deleted || (e.Op == "delete" && e.ID == "doc-0")
			}
			if deleted {
				break
			}
			if time.Now().After(deadline) || relay.cmd.ProcessState != nil {
				t.Fatalf("no delete event for doc-0 in %s:\n%s", stream, relay.out)
			}
			time.Sleep(100 * time.Millisecond)
		}
		delete(want, "doc-0")
	})

	t.Run("status as the status user", func(t *testing.T) {
		code, out := runBinary(t, 30*time.Second, "status", "--redis", srv.URL(), "--feed", "real-basic", "--es", c.URL(),
			"--es-ca-cert", sec(engines.FileCA), "--es-user", engines.UserStatus, "--es-password-file", sec(engines.PasswordFile(engines.UserStatus)))
		if code != 0 || strings.Contains(out, "403") || strings.Contains(out, "401") {
			t.Errorf("status: exit %d:\n%s", code, out)
		}
	})

	t.Run("bulk sink as the bulk user", func(t *testing.T) {
		p := startBinary(t, "consume", "--redis", srv.URL(), "--feed", "real-cert", "--group", "g", "--sink", "bulk",
			"--bulk-es", c.URL(), "--bulk-ca-cert", sec(engines.FileCA), "--bulk-user", engines.UserBulk,
			"--bulk-password-file", sec(engines.PasswordFile(engines.UserBulk)), "--bulk-index", "copy-{index}", "--shutdown-timeout", "1s")
		deadline := time.Now().Add(30 * time.Second)
		for {
			adminDo(t, c, "POST", "/_refresh", "")
			b := adminDo(t, c, "GET", "/_cat/indices/copy-*?h=index,docs.count", "")
			if strings.Contains(string(b), "copy-secure 5") {
				break
			}
			if time.Now().After(deadline) || p.cmd.ProcessState != nil {
				t.Fatalf("the bulk sink did not copy 5 documents into copy-secure (%s):\n%s", strings.TrimSpace(string(b)), p.out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("resync as the relay user", func(t *testing.T) {
		p := startBinary(t, append([]string{"resync"}, run("real-resync", relayPW...)[1:]...)...)
		stream := redisx.NewKeys("real-resync").Events()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var ids []string
			var end bool
			for _, e := range entries(t, rdb, stream) {
				if e.Op == redisx.OpUpsert {
					ids = append(ids, e.ID)
				}
				end = end || e.Op == redisx.OpSnapshotEnd
			}
			if end {
				if len(ids) != len(want) {
					t.Fatalf("resync: snapshot of %v, want the %d documents %v", ids, len(want), want)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("resync: no snapshot_end in %s:\n%s", stream, p.out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("consume --bootstrap as the bootstrap user", func(t *testing.T) {
		code, out := runBinary(t, 60*time.Second, "consume", "--redis", srv.URL(), "--feed", "real-basic", "--group", "boot",
			"--sink", "stdout", "--bootstrap", "--bootstrap-only", "--es", c.URL(), "--es-ca-cert", sec(engines.FileCA),
			"--es-user", engines.UserBootstrap, "--es-password-file", sec(engines.PasswordFile(engines.UserBootstrap)))
		if code != 0 {
			t.Fatalf("consume --bootstrap exited %d:\n%s", code, out)
		}
		for id := range want {
			if !strings.Contains(out, `"`+id+`"`) {
				t.Errorf("the copy did not hand %s to the sink:\n%s", id, tail(out, 20))
			}
		}
	})

	if c.Engine().Product == "elasticsearch" && c.SecurityKind() == engines.EngineSecurity {
		t.Run("bulk sink with an API key", func(t *testing.T) {
			k, err := c.CreateAPIKey(context.Background(), "escf-bulk", engines.RoleNamed("elasticsearch", "escf_bulk"))
			if err != nil {
				t.Fatal(err)
			}
			p := startBinary(t, "consume", "--redis", srv.URL(), "--feed", "real-cert", "--group", "k", "--sink", "bulk",
				"--bulk-es", c.URL(), "--bulk-ca-cert", sec(engines.FileCA), "--bulk-api-key-file", writeFile(t, "bulk.key", []byte(k.Encoded+"\n")),
				"--bulk-index", "copy-key-{index}", "--shutdown-timeout", "1s")
			deadline := time.Now().Add(30 * time.Second)
			for {
				adminDo(t, c, "POST", "/_refresh", "")
				b := adminDo(t, c, "GET", "/_cat/indices/copy-key-*?h=index,docs.count", "")
				if strings.Contains(string(b), "copy-key-secure 5") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the bulk sink with an API key did not copy 5 documents (%s):\n%s", strings.TrimSpace(string(b)), p.out)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}

	errSrv := redistest.Start(t)
	errRdb := errSrv.Client(t)
	wrongPW := writeFile(t, "wrong.pw", []byte("Not-the-password-1\n"))
	bad := func(extra ...string) []string {
		return append([]string{"run", "--redis", errSrv.URL(), "--feed", "refused", "--index", "secure"}, extra...)
	}
	plainURL := strings.Replace(c.URL(), "https://", "http://", 1)
	failures := []struct {
		name     string
		args     []string
		contains []string
	}{
		{"wrong password", bad("--es", c.URL(), "--es-ca-cert", sec(engines.FileCA), "--es-user", engines.UserRelay, "--es-password-file", wrongPW),
			[]string{`refused user "` + engines.UserRelay + `"`, "HTTP 401", "check --es-user/--es-password"}},
		{"no CA", bad(append([]string{"--es", c.URL()}, relayPW...)...),
			[]string{"TLS certificate of " + c.URL() + " is not trusted", "--es-ca-cert FILE"}},
		{"plain http:// to the TLS port", bad(append([]string{"--es", plainURL}, relayPW...)...),
			[]string{plainURL, "use https://"}},
		{"the status user as the relay", bad("--es", c.URL(), "--es-ca-cert", sec(engines.FileCA), "--es-user", engines.UserStatus,
			"--es-password-file", sec(engines.PasswordFile(engines.UserStatus))),
			[]string{`denied user "` + engines.UserStatus + `"`, "HTTP 403", "docs/SECURITY.md"}},
		{"the bulk user as the relay", bad("--es", c.URL(), "--es-ca-cert", sec(engines.FileCA), "--es-user", engines.UserBulk,
			"--es-password-file", sec(engines.PasswordFile(engines.UserBulk))),
			[]string{`denied user "` + engines.UserBulk + `"`, "HTTP 403", "docs/SECURITY.md"}},
	}
	// The node's certificate names 127.0.0.1 and localhost: reached as
	// 127.0.0.2 (a TCP forwarder), the client must refuse it.
	otherHost := forwardTCP(t, "127.0.0.2", strings.TrimPrefix(c.URL(), "https://"))
	failures = append(failures, struct {
		name     string
		args     []string
		contains []string
	}{"a host name the certificate is not for", bad(append([]string{"--es", "https://" + otherHost, "--es-ca-cert", sec(engines.FileCA)}, relayPW...)...),
		[]string{"is not trusted", "not 127.0.0.2", "put a name the certificate is valid for in --es"}})
	if c.Engine().Product == "elasticsearch" && c.SecurityKind() == engines.EngineSecurity {
		// An invalidated key and an expired one.
		ctx := context.Background()
		relayRole := engines.RoleNamed("elasticsearch", "escf_relay")
		gone, err := c.CreateAPIKey(ctx, "escf-gone", relayRole)
		if err != nil {
			t.Fatal(err)
		}
		adminDo(t, c, "DELETE", "/_security/api_key", fmt.Sprintf(`{"ids":[%q]}`, gone.ID))
		expired, err := c.CreateAPIKeyExpiring(ctx, "escf-expired", relayRole, "1s")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		for _, k := range []struct{ name, encoded string }{{"an invalidated API key", gone.Encoded}, {"an expired API key", expired.Encoded}} {
			failures = append(failures, struct {
				name     string
				args     []string
				contains []string
			}{k.name, bad("--es", c.URL(), "--es-ca-cert", sec(engines.FileCA), "--es-api-key-file", writeFile(t, "k.key", []byte(k.encoded+"\n"))),
				[]string{"refused the API key", "HTTP 401", "expired, invalidated"}})
		}
	}
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			if slices.Contains(tt.contains, "HTTP 403") && c.SecurityKind() == engines.TLSProxy {
				t.Skipf("%s is secured by a %s; this subtest needs the engine's 403", c.Engine(), c.SecurityKind())
			}
			code, out := runBinary(t, 60*time.Second, tt.args...)
			if code != 1 {
				t.Errorf("exit code %d, want 1; output:\n%s", code, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			for _, w := range tt.contains {
				if !strings.Contains(last, w) {
					t.Errorf("error line %q does not contain %q", last, w)
				}
			}
			for _, u := range engines.Users() {
				if pw := c.Password(u); pw != "" && strings.Contains(out, pw) {
					t.Errorf("the output shows %s's password:\n%s", u, out)
				}
			}
			t.Logf("%s", last)
			if dbs := keyspace(t, errRdb); len(dbs) != 0 {
				t.Errorf("the Redis holds keys after a refused start: %v", dbs)
			}
		})
	}
}

// forwardTCP listens on host (a loopback address) and forwards every
// connection to target, byte for byte (TLS passes through); it returns
// its host:port and stops with the test.
func forwardTCP(tb testing.TB, host, target string) string {
	tb.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in); _ = out.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
	return l.Addr().String()
}
