package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// runBinary runs the binary to completion and returns its exit code and
// output.
func runBinary(tb testing.TB, timeout time.Duration, args ...string) (int, string) {
	tb.Helper()
	cmd := binaryCommand(tb, nil, args...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String()
		}
		if err != nil {
			tb.Fatal(err)
		}
		return 0, out.String()
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		tb.Fatalf("%v did not exit within %s:\n%s", args, timeout, out.String())
		return 0, ""
	}
}

func closedPort(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// garbageServer is a TCP listener on 127.0.0.1 that answers every
// connection with an SSH banner and closes it: something that is not Redis.
func garbageServer(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(conn, "SSH-2.0-OpenSSH_9.2p1\r\n")
			conn.Close()
		}
	}()
	return l.Addr().String()
}

// keyspace is the server's INFO keyspace lines (one per non-empty db).
func keyspace(tb testing.TB, rdb *redis.Client) []string {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "keyspace").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var dbs []string
	for _, line := range strings.Split(info, "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "db") {
			dbs = append(dbs, line)
		}
	}
	return dbs
}

// writeFile writes data to a file in the test's temp dir.
func writeFile(tb testing.TB, name string, data []byte) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

// tlsDo is httpDo for a TLS emulator with the user elastic: it trusts the
// emulator's CA.
func tlsDo(tb testing.TB, c *esemu.Cluster, method, path, body string) []byte {
	tb.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CACertPEM())
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer cl.CloseIdleConnections()
	req, err := http.NewRequest(method, c.URL()+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth("elastic", "s3cret")
	resp, err := cl.Do(req)
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

// TestCLI_BadInput: every bad input gets one clear error line naming the
// thing and what to do, a non-zero exit (2 for usage, 1 for failures), and
// writes nothing: the Redis of the case holds no key afterwards (or, for
// the wrong-type case, only the key the test planted, unchanged).
func TestCLI_BadInput(t *testing.T) {
	c := cluster(t, esemu.Config{})
	createIndex(t, c, "present", 1, 0)
	createIndex(t, c, "shut", 1, 0)
	mustDo(t, "POST", c.URL()+"/shut/_close", "")
	mustDo(t, "PUT", c.URL()+"/ts-1", `{"settings":{"index.disable_sequence_numbers":true,"number_of_shards":1}}`)
	secured := cluster(t, esemu.Config{Users: map[string]string{"elastic": "right"}})
	osSecured := cluster(t, esemu.Config{Flavor: esemu.FlavorOpenSearch2, Users: map[string]string{"admin": "right"}})
	tlsES := cluster(t, esemu.Config{TLS: true})
	tlsHost := strings.TrimPrefix(tlsES.URL(), "https://")
	plainHost := strings.TrimPrefix(c.URL(), "http://")
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	// typed holds a key of the feed "typed" with another type than the feed's.
	typed := redistest.Start(t)
	typedRdb := typed.Client(t)
	typedKey := redisx.NewKeys("typed").Events()
	if err := typedRdb.Set(context.Background(), typedKey, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	deadRedis := "redis://" + closedPort(t) + "/0"
	deadES := "http://" + closedPort(t)
	notRedis := "redis://" + plainHost + "/0"
	garbage := "redis://" + garbageServer(t) + "/0"
	wrongDB := "redis://" + srv.Addr + "/99"
	caFile := writeFile(t, "ca.pem", tlsES.CACertPEM())
	notPEM := writeFile(t, "ca.txt", []byte("not a certificate\n"))
	longFeed := strings.Repeat("f", 101)

	run := func(redisURL string, extra ...string) []string {
		return append([]string{"run", "--es", c.URL(), "--redis", redisURL, "--index", "present"}, extra...)
	}
	consume := func(redisURL string, extra ...string) []string {
		return append([]string{"consume", "--redis", redisURL, "--group", "g", "--shutdown-timeout", "1s"}, extra...)
	}
	tests := []struct {
		name     string
		args     []string
		code     int
		contains []string
	}{
		{"unreachable ES", []string{"run", "--es", deadES, "--redis", srv.URL(), "--index", "present"}, 1,
			[]string{"cannot reach Elasticsearch", deadES, "check --es"}},
		{"ES URL password is masked when unreachable", []string{"run", "--es", strings.Replace(deadES, "http://", "http://elastic:hunter2@", 1), "--redis", srv.URL(), "--index", "present"}, 1,
			[]string{"cannot reach Elasticsearch", "elastic:xxxxx@", "check --es"}},
		{"wrong password", []string{"run", "--es", secured.URL(), "--es-user", "elastic", "--es-password", "hunter2", "--redis", srv.URL(), "--index", "present"}, 1,
			[]string{`refused user "elastic"`, "401", "unable to authenticate user [elastic]", "check --es-user/--es-password"}},
		{"no credentials", []string{"run", "--es", secured.URL(), "--redis", srv.URL(), "--index", "present"}, 1,
			[]string{"refused no credentials", "401", "missing authentication credentials"}},
		{"OpenSearch wrong password (plain-text 401)", []string{"run", "--es", osSecured.URL(), "--es-user", "admin", "--es-password", "hunter2", "--redis", srv.URL(), "--index", "present"}, 1,
			[]string{`refused user "admin"`, "HTTP 401: Unauthorized", "check --es-user/--es-password"}},
		{"untrusted certificate", []string{"run", "--es", tlsES.URL(), "--redis", srv.URL(), "--index", "present"}, 1,
			[]string{"TLS certificate of " + tlsES.URL() + " is not trusted", "certificate signed by unknown authority", "--es-ca-cert FILE", "--es-insecure"}},
		{"https to a plain HTTP cluster", []string{"run", "--es", "https://" + plainHost, "--redis", srv.URL(), "--index", "present"}, 1,
			[]string{"https://" + plainHost + " does not speak TLS", "use http:// in --es"}},
		{"http to a TLS cluster", []string{"run", "--es", "http://" + tlsHost, "--redis", srv.URL(), "--index", "present"}, 1,
			[]string{"http://" + tlsHost + " closed the connection", "speaks TLS", "use https:// in --es"}},
		{"CA file that is not PEM", []string{"run", "--es", tlsES.URL(), "--es-ca-cert", notPEM, "--redis", srv.URL(), "--index", "present"}, 2,
			[]string{"--es-ca-cert " + notPEM, "no PEM certificate"}},
		{"CA file missing", []string{"run", "--es", tlsES.URL(), "--es-ca-cert", notPEM + ".gone", "--redis", srv.URL(), "--index", "present"}, 2,
			[]string{"--es-ca-cert", "no such file"}},
		{"--es-insecure with --es-ca-cert", []string{"run", "--es", tlsES.URL(), "--es-ca-cert", caFile, "--es-insecure", "--redis", srv.URL(), "--index", "present"}, 2,
			[]string{"--es-ca-cert and --es-insecure contradict each other"}},
		{"unknown index", []string{"run", "--es", c.URL(), "--redis", srv.URL(), "--index", "present,absent"}, 1,
			[]string{`--index "absent" names no index, alias or data stream`, "no such index [absent]", "check for a typo"}},
		{"alias with a typo", []string{"run", "--es", c.URL(), "--redis", srv.URL(), "--index", "presnt-alias"}, 1,
			[]string{`--index "presnt-alias" names no index, alias or data stream`, "check for a typo"}},
		{"data stream with a typo", []string{"run", "--es", c.URL(), "--redis", srv.URL(), "--index", "logs-app-nope"}, 1,
			[]string{`--index "logs-app-nope" names no index, alias or data stream`}},
		{"closed index named explicitly", []string{"run", "--es", c.URL(), "--redis", srv.URL(), "--index", "present,shut"}, 1,
			[]string{`index shut (--index "shut") is closed`, "POST /shut/_open", `"shut*"`}},
		{"seq_no-disabled index", []string{"run", "--es", c.URL(), "--redis", srv.URL(), "--index", "ts-1"}, 1,
			[]string{"index ts-1", "sequence numbers disabled", "index.disable_sequence_numbers", "remove it from --index"}},
		{"unreachable Redis", run(deadRedis), 1, []string{"cannot reach Redis at " + deadRedis}},
		{"Redis URL that is the cluster's HTTP port", run(notRedis), 1,
			[]string{"--redis: " + notRedis + " is not a Redis server", `answered "HTTP/1.1 400 Bad Request"`}},
		{"Redis URL of a server answering garbage", run(garbage), 1,
			[]string{garbage + " is not a Redis server", "SSH-2.0"}},
		{"Redis database out of range", run(wrongDB), 1,
			[]string{"Redis at " + wrongDB + " has no database 99", "DB index is out of range", "it has 16 (0..15"}},
		{"stream key of the wrong type", run(typed.URL(), "--feed", "typed"), 1,
			[]string{`feed "typed"`, "key " + typedKey + " in " + typed.URL() + " is a string, not a stream", "use another --feed", "delete the key"}},
		{"malformed Redis URL", run("localhost:6379"), 2,
			[]string{"--redis", "bad Redis URL", "localhost:6379"}},
		{"Redis URL password is masked", run("ftp://u:hunter2@host"), 2,
			[]string{"--redis", "scheme \"ftp\""}},
		{"malformed ES URL", []string{"run", "--es", "ftp://nowhere", "--redis", srv.URL(), "--index", "present"}, 2,
			[]string{"--es", "bad Elasticsearch URL", "ftp://nowhere"}},
		{"ES URL without host", []string{"run", "--es", "http://", "--redis", srv.URL(), "--index", "present"}, 2,
			[]string{"--es", "no host"}},
		{"ES URL password is masked", []string{"run", "--es", "ftp://u:hunter2@nowhere", "--redis", srv.URL(), "--index", "present"}, 2,
			[]string{"--es", "bad Elasticsearch URL"}},
		{"no index", []string{"run", "--es", c.URL(), "--redis", srv.URL()}, 2,
			[]string{"no index to follow", "--index"}},
		{"bad --from", run(srv.URL(), "--from", "yesterday"), 2,
			[]string{`--from "yesterday"`, "beginning or now"}},
		{"feed name with braces", run(srv.URL(), "--feed", "a{b}"), 2, []string{`--feed: feed name "a{b}" contains '{'`}},
		{"feed name with a closing brace", run(srv.URL(), "--feed", "ab}"), 2, []string{`feed name "ab}" contains '}'`}},
		{"feed name with a colon", run(srv.URL(), "--feed", "a:b"), 2, []string{`feed name "a:b" contains ':'`}},
		{"feed name with a space", run(srv.URL(), "--feed", "a b"), 2, []string{`feed name "a b" contains ' '`}},
		{"feed name with a control character", run(srv.URL(), "--feed", "a\x1bb"), 2, []string{"control character"}},
		{"empty feed name", run(srv.URL(), "--feed", ""), 2, []string{"feed name is empty"}},
		{"feed name too long", run(srv.URL(), "--feed", longFeed), 2, []string{"is 101 characters long: use at most 100"}},
		{"bad batch size", run(srv.URL(), "--batch-size", "0"), 2, []string{"--batch-size 0"}},
		{"bad --max-delete-fraction", run(srv.URL(), "--deletes", "--max-delete-fraction", "1.5"), 2,
			[]string{"--max-delete-fraction 1.5"}},
		{"bad --delete-listing", run(srv.URL(), "--deletes", "--delete-listing", "magic"), 2,
			[]string{`--delete-listing "magic"`, "auto, pit or scroll"}},
		{"--max-delete-fraction without --deletes", run(srv.URL(), "--max-delete-fraction", "0.2"), 2,
			[]string{"--max-delete-fraction needs --deletes"}},
		{"--delete-listing without --deletes", run(srv.URL(), "--delete-listing", "pit"), 2,
			[]string{"--delete-listing needs --deletes"}},
		{"--delete-scan-interval without --deletes", run(srv.URL(), "--delete-scan-interval", "1m"), 2,
			[]string{"--delete-scan-interval needs --deletes"}},
		{"--index-deleted-event without --deletes", run(srv.URL(), "--index-deleted-event"), 2,
			[]string{"--index-deleted-event needs --deletes"}},
		{"--max-stream-len without --trim", run(srv.URL(), "--max-stream-len", "10"), 2,
			[]string{"--max-stream-len needs --trim"}},
		{"--min-retention without --trim", run(srv.URL(), "--min-retention", "1h"), 2,
			[]string{"--min-retention needs --trim"}},
		{"--trim-interval without --trim", run(srv.URL(), "--trim-interval", "1m"), 2,
			[]string{"--trim-interval needs --trim"}},
		{"unknown flag", []string{"run", "--nope"}, 2, []string{"unknown flag --nope", "run --help"}},
		{"bad log level", []string{"run", "--index", "present", "--log-level", "loud"}, 2, []string{`--log-level "loud"`}},

		{"resync with a closed index named explicitly", []string{"resync", "--es", c.URL(), "--redis", srv.URL(), "--index", "shut"}, 1,
			[]string{"index shut", "is closed"}},

		{"consume: Redis URL that is the cluster's HTTP port", consume(notRedis), 1,
			[]string{notRedis + " is not a Redis server"}},
		{"consume: Redis database out of range", consume(wrongDB), 1, []string{"has no database 99"}},
		{"consume: stream key of the wrong type", consume(typed.URL(), "--feed", "typed"), 1,
			[]string{"key " + typedKey + " in " + typed.URL() + " is a string, not a stream"}},
		{"consume: bad feed name", consume(srv.URL(), "--feed", "x:y"), 2, []string{`feed name "x:y" contains ':'`}},
		{"consume: flag of another sink", consume(srv.URL(), "--sink", "stdout", "--bulk-es", c.URL()), 2,
			[]string{`--bulk-es belongs to --sink bulk, but --sink is "stdout"`}},
		{"consume: file flag with the http sink", consume(srv.URL(), "--sink", "http", "--http-url", "http://127.0.0.1:1/", "--file-path", "/tmp/x"), 2,
			[]string{`--file-path belongs to --sink file, but --sink is "http"`}},
		{"consume: cache flag with the bulk sink", consume(srv.URL(), "--sink", "bulk", "--bulk-es", c.URL(), "--cache-mode", "set"), 2,
			[]string{`--cache-mode belongs to --sink redis, but --sink is "bulk"`}},
		{"consume: bulk sink with an untrusted certificate", consume(srv.URL(), "--sink", "bulk", "--bulk-es", tlsES.URL()), 1,
			[]string{"--sink bulk", "is not trusted", "--bulk-ca-cert FILE", "--bulk-insecure"}},
		{"consume: bulk sink with a wrong password", consume(srv.URL(), "--sink", "bulk", "--bulk-es", secured.URL(), "--bulk-user", "elastic", "--bulk-password", "hunter2"), 1,
			[]string{`refused user "elastic"`, "check --bulk-user/--bulk-password"}},
		{"consume: bulk sink unreachable", consume(srv.URL(), "--sink", "bulk", "--bulk-es", deadES), 1,
			[]string{"cannot reach Elasticsearch", "check --bulk-es"}},

		{"status: Redis URL that is the cluster's HTTP port", []string{"status", "--redis", notRedis}, 1,
			[]string{notRedis + " is not a Redis server"}},
		{"status: Redis database out of range", []string{"status", "--redis", wrongDB}, 1, []string{"has no database 99"}},
		{"status: stream key of the wrong type", []string{"status", "--redis", typed.URL(), "--feed", "typed"}, 1,
			[]string{"key " + typedKey + " in " + typed.URL() + " is a string, not a stream"}},
		{"status: bad feed name", []string{"status", "--redis", srv.URL(), "--feed", "a b"}, 2, []string{`feed name "a b" contains ' '`}},
		{"status: --es-ca-cert without --es", []string{"status", "--redis", srv.URL(), "--es-ca-cert", caFile}, 2,
			[]string{"--es-ca-cert needs --es"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := runBinary(t, 30*time.Second, tt.args...)
			if code != tt.code {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tt.code, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "es-changefeed: ") {
				t.Errorf("last line is not the error line: %q", last)
			}
			for _, want := range tt.contains {
				if !strings.Contains(last, want) {
					t.Errorf("error line %q does not contain %q", last, want)
				}
			}
			if strings.Contains(out, "hunter2") {
				t.Errorf("output leaks a password:\n%s", out)
			}
			t.Logf("%s", last)
			// Nothing written: the suite's Redis stays empty (every db), and
			// the planted key is alone and unchanged.
			if dbs := keyspace(t, rdb); len(dbs) != 0 {
				t.Errorf("the Redis holds keys after a refused start: %v", dbs)
			}
			keys, err := typedRdb.Keys(context.Background(), "*").Result()
			if err != nil {
				t.Fatal(err)
			}
			if v, _ := typedRdb.Get(context.Background(), typedKey).Result(); len(keys) != 1 || v != "x" {
				t.Errorf("the planted key changed or got company: keys %v, %s = %q", keys, typedKey, v)
			}
		})
	}
}

// TestCLI_TLS: with --es-ca-cert the relay follows a cluster whose
// certificate a private CA signed (and status reads it); with --es-insecure
// too, after a warning.
func TestCLI_TLS(t *testing.T) {
	c := cluster(t, esemu.Config{TLS: true, Users: map[string]string{"elastic": "s3cret"}})
	ca := writeFile(t, "ca.pem", c.CACertPEM())
	tlsDo(t, c, "PUT", "/secure", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`)
	want := map[string]string{}
	for i := 0; i < 5; i++ {
		id, src := fmt.Sprintf("doc-%d", i), fmt.Sprintf(`{"n":%d}`, i)
		tlsDo(t, c, "PUT", "/secure/_doc/"+id+"?refresh=true", src)
		want[id] = src
	}
	srv := redistest.Start(t)
	follow := func(t *testing.T, feedName string, tlsArgs ...string) *proc {
		args := append([]string{"run", "--es", c.URL(), "--es-user", "elastic", "--es-password", "s3cret", "--redis", srv.URL(),
			"--feed", feedName, "--index", "secure", "--poll-interval", "20ms"}, tlsArgs...)
		p := startBinary(t, args...)
		waitMirrored(t, p, srv, feedName, want)
		return p
	}
	t.Run("--es-ca-cert", func(t *testing.T) {
		p := follow(t, "tls", "--es-ca-cert", ca)
		if strings.Contains(p.out.String(), "verification is off") {
			t.Errorf("a warning about skipped verification with a CA:\n%s", p.out)
		}
		code, out := runBinary(t, 30*time.Second, "status", "--redis", srv.URL(), "--feed", "tls", "--es", c.URL(),
			"--es-user", "elastic", "--es-password", "s3cret", "--es-ca-cert", ca)
		if code != 0 || strings.Contains(out, "certificate") {
			t.Errorf("status over TLS: exit %d:\n%s", code, out)
		}
	})
	t.Run("--es-insecure", func(t *testing.T) {
		p := follow(t, "tls-insecure", "--es-insecure")
		if !strings.Contains(p.out.String(), "TLS certificate verification is off") {
			t.Errorf("no warning about skipped verification:\n%s", p.out)
		}
	})
}

// TestCLI_ClosedIndex: a closed index named explicitly is refused at start
// (TestCLI_BadInput) — but not one a pattern matches, nor one the feed
// already follows (a restart during maintenance must not crash-loop): those
// are skipped with a warning and read on once reopened.
func TestCLI_ClosedIndex(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	shut, kept := c.Index("shut-1"), c.Index("kept")
	createIndex(t, c, shut, 1, 0)
	mustDo(t, "POST", c.URL()+"/"+shut+"/_close", "")
	createIndex(t, c, kept, 1, 0)
	mustDo(t, "PUT", c.URL()+"/"+kept+"/_doc/a", `{}`)
	srv := redistest.Start(t)

	// A relay that resolved its targets twice has met the closed index
	// and gone on (waitResolutions fails if it exited).
	t.Run("matched by a pattern", func(t *testing.T) {
		addr := closedPort(t)
		p := startBinary(t, relayArgs(c, srv.URL(), "pattern", c.Index("shut-*"), "--metrics-addr", addr)...)
		waitResolutions(t, p, addr, 2)
		waitOutput(t, p.out, "index is closed", 10*time.Second)
		p.kill()
	})
	t.Run("named explicitly and already followed", func(t *testing.T) {
		p := startBinary(t, relayArgs(c, srv.URL(), "known", kept)...)
		waitCaughtUp(t, c, storeFor(t, srv, "known"), []string{kept}, 10*time.Second)
		p.kill()
		mustDo(t, "POST", c.URL()+"/"+kept+"/_close", "")
		addr := closedPort(t)
		p = startBinary(t, relayArgs(c, srv.URL(), "known", kept, "--metrics-addr", addr)...)
		waitResolutions(t, p, addr, 2)
		waitOutput(t, p.out, "index is closed", 10*time.Second)
		mustDo(t, "POST", c.URL()+"/"+kept+"/_open", "")
		mustDo(t, "PUT", c.URL()+"/"+kept+"/_doc/b", `{}`)
		waitCaughtUp(t, c, storeFor(t, srv, "known"), []string{kept}, 10*time.Second)
		evs := entries(t, srv.Client(t), redisx.NewKeys("known").Events())
		if len(evs) != 2 || evs[0].ID != "a" || evs[1].ID != "b" {
			t.Fatalf("events %+v, want a then b", evs)
		}
	})
}
