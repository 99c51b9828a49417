package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// docACLRules reads the ACL SETUSER lines of docs/SECURITY.md: user name
// -> the arguments after SETUSER, with the feed and password filled in.
// The test runs with exactly what the document tells users to paste.
func docACLRules(tb testing.TB, feed string, passwords map[string]string) map[string][]string {
	tb.Helper()
	f, err := os.Open(filepath.Join("..", "..", "docs", "SECURITY.md"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "ACL SETUSER escf-") {
			continue
		}
		fields := strings.Fields(line)[2:]
		user := fields[0]
		pw, ok := passwords[user]
		if !ok {
			tb.Fatalf("docs/SECURITY.md has rules for %s, the test knows no password for it", user)
		}
		for i, a := range fields {
			a = strings.ReplaceAll(a, "{myfeed}", "{"+feed+"}")
			if a == ">CHANGE-ME" {
				a = ">" + pw
			}
			fields[i] = a
		}
		if out[user] != nil {
			// A second line adds rules to the user (SETUSER is incremental).
			out[user] = append(out[user], fields[1:]...)
			continue
		}
		out[user] = fields
	}
	for user := range passwords {
		if out[user] == nil {
			tb.Fatalf("docs/SECURITY.md has no ACL SETUSER line for %s", user)
		}
	}
	return out
}

// without returns rules minus one rule.
func without(rules []string, drop string) []string {
	var out []string
	for _, r := range rules {
		if r != drop {
			out = append(out, r)
		}
	}
	return out
}

// startBinaryWithEnv is startBinary with extra environment variables.
func startBinaryWithEnv(tb testing.TB, env []string, args ...string) *proc {
	tb.Helper()
	p := &proc{out: &syncBuffer{}}
	p.cmd = binaryCommand(tb, env, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	return p
}

// stopGracefully sends SIGTERM and wants exit 0 within 10s.
func stopGracefully(tb testing.TB, p *proc, what string) {
	tb.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			tb.Fatalf("%s exited with %v after SIGTERM:\n%s", what, err, p.out)
		}
	case <-time.After(10 * time.Second):
		tb.Fatalf("%s did not exit within 10s of SIGTERM:\n%s", what, p.out)
	}
}

// waitExit waits for p to end by itself and returns its exit code.
func waitExit(tb testing.TB, p *proc, timeout time.Duration) int {
	tb.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			tb.Fatal(err)
		}
		return 0
	case <-time.After(timeout):
		tb.Fatalf("%v did not exit within %s:\n%s", p.cmd.Args[1:], timeout, p.out)
		return 0
	}
}

// TestRedisSecurity_ACLOverTLS: the relay (with --deletes, --trim,
// --max-backlog and the status page), a consumer mirroring into a second
// cluster, resync and status all run over rediss:// with a client
// certificate, each as an ACL user with exactly the rules of
// docs/SECURITY.md: the mirror is exact, Redis logs no denial, and no
// password shows in any output. With one rule removed, the relay or the
// consumer exits 1 naming the missing permission.
func TestRedisSecurity_ACLOverTLS(t *testing.T) {
	srv := redistest.StartTLS(t, redistest.TLSOptions{AuthClients: "yes"})
	const feedName = "secured"
	passwords := map[string]string{"escf-relay": "Rly-7qX2-unguessable", "escf-consumer": "Cns-5vB9-unguessable", "escf-status": "Sts-3mK8-unguessable"}
	rules := docACLRules(t, feedName, passwords)
	setUser := func(user string, r []string) { srv.ACL(t, append([]string{"SETUSER", user, "reset"}, r[1:]...)...) }
	for user, r := range rules {
		setUser(user, r)
	}
	userURL := func(user string) string { return fmt.Sprintf("rediss://%s@%s/0", user, srv.Addr) }
	tlsArgs := []string{"--redis-ca-cert", srv.TLS.CA, "--redis-client-cert", srv.TLS.ClientCert, "--redis-client-key", srv.TLS.ClientKey}
	relayPWFile := writeFile(t, "relay.pw", []byte(passwords["escf-relay"]+"\n"))

	src := esCluster(t, esemu.Config{})
	dst := mirrorTarget(t, src, esemu.Config{})
	orders := src.Index("orders")
	createIndex(t, src, orders, 2, 0)
	createIndex(t, dst, orders, 1, 0)
	for i := 0; i < 30; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/o%d", src.URL(), orders, i), fmt.Sprintf(`{"n":%d}`, i))
	}
	relayFlags := append([]string{"--deletes", "--delete-scan-interval", "200ms", "--delete-scan-budget", "1", "--trim", "--trim-interval", "200ms",
		"--max-backlog", "100000", "--metrics-addr", "127.0.0.1:0", "--redis-password-file", relayPWFile}, tlsArgs...)
	relay := startBinary(t, relayArgs(src, userURL("escf-relay"), feedName, orders, relayFlags...)...)
	consumer := startBinaryWithEnv(t, []string{"ESCF_REDIS_PASSWORD=" + passwords["escf-consumer"]},
		append(consumeArgs(userURL("escf-consumer"), feedName, "mirror", "c1", dst.URL()), tlsArgs...)...)
	waitTargetMirror(t, src, dst, orders, 30*time.Second)
	// Updates and deletes of delivered documents: delete scans list ids.
	for i := 0; i < 30; i += 3 {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/o%d", src.URL(), orders, i), `{"edited":true}`)
	}
	for i := 1; i < 30; i += 5 {
		mustDo(t, "DELETE", fmt.Sprintf("%s/%s/_doc/o%d", src.URL(), orders, i), "")
	}
	n := waitTargetMirror(t, src, dst, orders, 30*time.Second)

	// The status page and metrics of the relay read as escf-relay.
	m := regexp.MustCompile(`addr=(http://[0-9.:]+)/`).FindStringSubmatch(relay.out.String())
	if m == nil {
		t.Fatalf("the relay did not log its metrics address:\n%s", relay.out)
	}
	for _, path := range []string{"/status.json", "/metrics", "/"} {
		resp, err := http.Get(m[1] + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
	}
	stopGracefully(t, relay, "the relay")
	// resync as escf-relay: SCAN, DEL, then the snapshot.
	resync := startBinaryWithEnv(t, []string{"ESCF_REDIS_PASSWORD_FILE=" + relayPWFile},
		append(append(append([]string{"resync"}, inspect(src).cliArgs()...), "--redis", userURL("escf-relay"), "--feed", feedName, "--index", orders,
			"--poll-interval", "20ms", "--lease-ttl", "500ms"), tlsArgs...)...)
	admin := srv.Client(t)
	stream := redisx.NewKeys(feedName).Events()
	deadline := time.Now().Add(20 * time.Second)
	for {
		evs := entries(t, admin, stream)
		if len(evs) > 0 && evs[len(evs)-1].Op == redisx.OpSnapshotEnd {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resync wrote no snapshot_end within 20s:\n%s", resync.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopGracefully(t, resync, "resync")
	waitTargetMirror(t, src, dst, orders, 20*time.Second)
	// status as escf-status, with the snapshot's entries in the stream (the
	// resync did not trim): it reads the first and last entry too.
	code, statusOut := runBinary(t, 20*time.Second, append([]string{"status", "--json", "--redis", userURL("escf-status"),
		"--redis-password", passwords["escf-status"], "--feed", feedName}, tlsArgs...)...)
	var rep struct {
		Stream struct {
			EntriesAdded int64 `json:"entries_added"`
		} `json:"stream"`
		Groups  []struct{ Name string } `json:"groups"`
		Indices []struct{ Name string } `json:"indices"`
	}
	if jerr := json.Unmarshal([]byte(statusOut[:strings.LastIndex(statusOut, "}")+1]), &rep); jerr != nil || (code != 0 && code != 1) {
		t.Fatalf("status as escf-status: exit %d, %v:\n%s", code, jerr, statusOut)
	}
	if rep.Stream.EntriesAdded == 0 || len(rep.Groups) != 1 || rep.Groups[0].Name != "mirror" || len(rep.Indices) == 0 {
		t.Fatalf("status as escf-status did not read the feed:\n%s", statusOut)
	}

	stopGracefully(t, consumer, "the consumer")

	// run's persistence check (CONFIG GET) is refused by design: the rules
	// do not grant it (docs/SECURITY.md).
	var denials []map[string]any
	for _, d := range srv.ACLLog(t) {
		if d["object"] != "config|get" {
			denials = append(denials, d)
		}
	}
	if len(denials) > 0 {
		t.Fatalf("Redis refused commands of the documented rules: %v", denials)
	}
	for _, out := range []string{relay.out.String(), consumer.out.String(), statusOut, resync.out.String()} {
		for _, pw := range passwords {
			if strings.Contains(out, pw) {
				t.Fatalf("a password shows in the output:\n%s", out)
			}
		}
	}
	t.Logf("mirrored %d documents over TLS as ACL users with the documented rules; status saw %d entries added", n, rep.Stream.EntriesAdded)

	// One rule fewer: the command stops at once, naming what to grant.
	missing := []struct {
		user, drop, want string
		args             []string
	}{
		{"escf-relay", "+xadd", "XADD", relayArgs(src, userURL("escf-relay"), feedName, orders, "--redis-password-file", relayPWFile)},
		{"escf-relay", "+evalsha", "EVALSHA", relayArgs(src, userURL("escf-relay"), feedName, orders, "--redis-password-file", relayPWFile)},
		{"escf-relay", "+pexpire", "Lua script of command EVALSHA on key escf:{secured}:lease", relayArgs(src, userURL("escf-relay"), feedName, orders, "--redis-password-file", relayPWFile)},
		{"escf-consumer", "+xreadgroup", "XREADGROUP", append(consumeArgs(userURL("escf-consumer"), feedName, "mirror", "c1", dst.URL()),
			"--redis-password", passwords["escf-consumer"])},
		// --start $: the relay trims (--trim), and a new group at 0 is
		// refused before it is created (history lost).
		{"escf-consumer", "+xgroup|create", "XGROUP|CREATE", append(consumeArgs(userURL("escf-consumer"), feedName, "other-group", "c1", dst.URL()),
			"--redis-password", passwords["escf-consumer"], "--start", "$")},
	}
	for _, tt := range missing {
		t.Run("without "+tt.drop, func(t *testing.T) {
			r := rules[tt.user]
			if len(without(r, tt.drop)) == len(r) {
				t.Fatalf("the documented rules of %s have no %s", tt.user, tt.drop)
			}
			setUser(tt.user, without(r, tt.drop))
			defer setUser(tt.user, r)
			// A new document, so that the relay has an event to XADD.
			mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/new-%s", src.URL(), orders, tt.want), `{"new":true}`)
			p := startBinary(t, append(tt.args, tlsArgs...)...)
			code := waitExit(t, p, 20*time.Second)
			out := p.out.String()
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			grant := tt.drop
			if tt.drop == "+pexpire" {
				grant = "PEXPIRE" // Redis 7.0 does not say which command of the script
			}
			for _, want := range []string{tt.want, tt.user, grant, "docs/SECURITY.md"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			for _, pw := range passwords {
				if strings.Contains(out, pw) {
					t.Fatalf("a password shows in the output:\n%s", out)
				}
			}
			t.Logf("%s", lastLine(out))
		})
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestRedisSecurity_BadTLSAndPassword: a CA that did not sign the server's
// certificate, no client certificate, a wrong password from a file, a
// password file that is missing: each exits with one line naming the cause
// and the flag to pass, and never shows the password.
func TestRedisSecurity_BadTLSAndPassword(t *testing.T) {
	srv := redistest.StartTLS(t, redistest.TLSOptions{AuthClients: "yes"})
	const secret = "Wr0ng-pw-7hZq-unguessable"
	srv.SetUser(t, "escf", "Right-pw-unguessable", "~*", "+@all")
	srv.SetUser(t, "other-feed", "Right-pw-unguessable", "~escf:{other}:*", "+@all")
	other := redistest.NewCA(t, "not-the-servers-ca")
	otherCA := writeFile(t, "other-ca.crt", other.CertPEM)
	wrongPW := writeFile(t, "wrong.pw", []byte(secret+"\n"))
	c := esCluster(t, esemu.Config{})
	present := c.Index("present")
	createIndex(t, c, present, 1, 0)
	url := fmt.Sprintf("rediss://escf@%s/0", srv.Addr)
	rightPW := writeFile(t, "right.pw", []byte("Right-pw-unguessable"))
	run := func(extra ...string) []string {
		args := append([]string{"run"}, inspect(c).cliArgs()...)
		return append(append(args, "--redis", url, "--feed", "bad", "--index", present), extra...)
	}
	// unreachable is run with the cluster's URL replaced by a closed port:
	// with several --es the relay starts as long as one node answers.
	unreachable := func(extra ...string) []string {
		return append([]string{"run", "--es", "http://" + closedPort(t), "--redis", url, "--feed", "bad", "--index", present}, extra...)
	}
	cert := []string{"--redis-client-cert", srv.TLS.ClientCert, "--redis-client-key", srv.TLS.ClientKey}
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"wrong CA", run(append([]string{"--redis-ca-cert", otherCA, "--redis-password-file", rightPW}, cert...)...), 1,
			[]string{"not trusted", "certificate signed by unknown authority", "--redis-ca-cert"}},
		{"system CAs", run(append([]string{"--redis-password-file", rightPW}, cert...)...), 1,
			[]string{"not trusted", "--redis-ca-cert", "--redis-insecure"}},
		{"no client certificate", run("--redis-ca-cert", srv.TLS.CA, "--redis-password-file", rightPW), 1,
			[]string{"refused the TLS handshake", "certificate required", "--redis-client-cert", "--redis-client-key"}},
		{"wrong password from a file", run(append([]string{"--redis-ca-cert", srv.TLS.CA, "--redis-password-file", wrongPW}, cert...)...), 1,
			[]string{"refused the credentials", "WRONGPASS", "--redis-password-file"}},
		{"wrong password in the URL", run(append([]string{"--redis", fmt.Sprintf("rediss://escf:%s@%s/0", secret, srv.Addr), "--redis-ca-cert", srv.TLS.CA}, cert...)...), 1,
			[]string{"refused the credentials", "escf:xxxxx@"}},
		{"a user for another feed's keys", run(append([]string{"--redis", fmt.Sprintf("rediss://other-feed@%s/0", srv.Addr), "--redis-ca-cert", srv.TLS.CA, "--redis-password-file", rightPW}, cert...)...), 1,
			[]string{"NOPERM", `user "other-feed"`, "~escf:{<feed>}:*", "docs/SECURITY.md"}},
		{"missing password file", run("--redis-password-file", "/nonexistent/pw"), 2,
			[]string{"--redis-password-file", "no such file"}},
		{"password and password file", run("--redis-password", secret, "--redis-password-file", rightPW), 2,
			[]string{"--redis-password and --redis-password-file"}},
		{"client cert without key", run("--redis-client-cert", srv.TLS.ClientCert), 2,
			[]string{"--redis-client-cert and --redis-client-key go together"}},
		{"TLS flag with redis://", run("--redis", "redis://"+srv.Addr+"/0", "--redis-ca-cert", srv.TLS.CA), 2,
			[]string{"--redis-ca-cert needs TLS", "rediss://"}},
		{"insecure and CA", run("--redis-ca-cert", srv.TLS.CA, "--redis-insecure"), 2,
			[]string{"contradict"}},
		{"insecure warns, then works up to ES", unreachable(append([]string{"--redis-insecure", "--redis-password-file", rightPW}, cert...)...), 1,
			[]string{"TLS certificate verification is off", "--redis-insecure", "cannot reach Elasticsearch"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := runBinary(t, 30*time.Second, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d:\n%s", code, tt.code, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, secret) {
				t.Fatalf("the password shows:\n%s", out)
			}
			t.Logf("%s", lastLine(out))
		})
	}
	if keys := srv.Client(t).Keys(context.Background(), "*").Val(); len(keys) > 0 {
		t.Fatalf("bad input wrote keys: %v", keys)
	}
}

// TestRedisSecurity_RelayThroughSentinel: the relay binary finds its Redis
// through a sentinel (redis-sentinel://); the master is killed; the
// sentinel promotes the replica and the relay carries on writing to it: the
// stream replays to exactly the cluster's documents.
func TestRedisSecurity_RelayThroughSentinel(t *testing.T) {
	st := redistest.StartSentinels(t, 1)
	c := esCluster(t, esemu.Config{})
	watched := c.Index("watched")
	createIndex(t, c, watched, 2, 0)
	relay := startBinary(t, relayArgs(c, st.URL(), "sentinel", watched)...)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.Name, SentinelAddrs: st.Addrs})
	defer rdb.Close()
	stream := redisx.NewKeys("sentinel").Events()
	waitReplay := func(what string, timeout time.Duration) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		var diff string
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			msgs, err := rdb.XRange(ctx, stream, "-", "+").Result()
			cancel()
			if err == nil {
				evs := make([]redisx.Event, 0, len(msgs))
				for _, m := range msgs {
					e, perr := redisx.ParseEvent(m)
					if perr != nil {
						t.Fatal(perr)
					}
					evs = append(evs, e)
				}
				if diff = diffDocs(clusterDocs(t, c, watched), replay(evs)); diff == "" {
					return
				}
			} else {
				diff = err.Error()
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: the stream does not replay to the cluster within %s:\n%s\nrelay:\n%s\nsentinel:\n%s\nreplica:\n%s", what, timeout, diff, relay.out, st.Log(), st.Replica.Log())
	}
	for i := 0; i < 20; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/d%d", c.URL(), watched, i), fmt.Sprintf(`{"n":%d}`, i))
	}
	waitReplay("before the failover", 15*time.Second)
	old := st.MasterAddr(t)
	// A healthy replica: everything written so far reached it. (One that
	// lagged by all of the feed would come up without the feed's state, and
	// the relay would stop and ask for a resync, as it should.)
	st.WaitReplicated(t)
	st.Master.Stop()
	killed := time.Now()
	for i := 10; i < 40; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/d%d", c.URL(), watched, i), fmt.Sprintf(`{"n":%d,"after":true}`, i))
	}
	waitReplay("after the failover", 25*time.Second)
	if now := st.MasterAddr(t); now == old || now != st.Replica.Addr {
		t.Fatalf("master is %s, want the former replica %s", now, st.Replica.Addr)
	}
	if relay.cmd.ProcessState != nil {
		t.Fatalf("the relay exited:\n%s", relay.out)
	}
	t.Logf("the relay wrote on to the new master %s; the stream was complete %s after the old master was killed",
		st.Replica.Addr, time.Since(killed).Round(time.Millisecond))
	for _, line := range strings.Split(relay.out.String(), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Logf("relay: %s", line)
		}
	}
	stopGracefully(t, relay, "the relay")
}

// TestRedisSecurity_CacheSinkOverTLS: the redis sink writes its cache into
// another Redis over TLS with a client certificate and a password from a
// file (--cache-redis-… flags); the cache flags without --cache-redis, or
// with another sink, are refused.
func TestRedisSecurity_CacheSinkOverTLS(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	cached := c.Index("cached")
	createIndex(t, c, cached, 1, 0)
	feedRedis := redistest.Start(t)
	cache := redistest.StartTLS(t, redistest.TLSOptions{AuthClients: "yes"})
	const secret = "Cache-pw-4tR8-unguessable"
	cache.SetUser(t, "cache-writer", secret, "~cache:*", "~escf:{cache}:fence:*", "~escf:{cache}:applied:*", "-@all", "+ping", "+evalsha", "+eval", "+hget", "+hset", "+set", "+del")
	pw := writeFile(t, "cache.pw", []byte(secret))
	f := startRelay(t, c, feedRedis.URL(), "cachefeed", []string{cached}, nil)
	for i := 0; i < 5; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/k%d", c.URL(), cached, i), fmt.Sprintf(`{"n":%d}`, i))
	}
	waitCaughtUp(t, c, f.store, []string{cached}, 10*time.Second)
	cacheFlags := []string{"--sink", "redis", "--cache-mode", "set", "--cache-redis", fmt.Sprintf("rediss://cache-writer@%s/0", cache.Addr),
		"--cache-redis-password-file", pw, "--cache-redis-ca-cert", cache.TLS.CA,
		"--cache-redis-client-cert", cache.TLS.ClientCert, "--cache-redis-client-key", cache.TLS.ClientKey}
	p := startBinary(t, append([]string{"consume", "--redis", feedRedis.URL(), "--feed", "cachefeed", "--group", "cache"}, cacheFlags...)...)
	admin := cache.Client(t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, err := admin.Get(context.Background(), "cache:"+cached+":k4").Result()
		if err == nil && strings.Contains(v, `"n":4`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cache over TLS has no cache:%s:k4 within 15s (%v):\n%s", cached, err, p.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopGracefully(t, p, "the consumer")
	if strings.Contains(p.out.String(), secret) {
		t.Fatalf("the password shows:\n%s", p.out)
	}
	if denials := cache.ACLLog(t); len(denials) > 0 {
		t.Fatalf("the cache Redis refused commands: %v", denials)
	}

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"cache TLS flag without --cache-redis", []string{"--sink", "redis", "--cache-redis-ca-cert", cache.TLS.CA}, "--cache-redis-ca-cert needs --cache-redis"},
		{"cache flag with another sink", []string{"--sink", "stdout", "--cache-redis-password-file", pw}, "--cache-redis-password-file belongs to --sink redis"},
		{"cache Redis without its client certificate", []string{"--sink", "redis", "--cache-redis", fmt.Sprintf("rediss://cache-writer@%s/0", cache.Addr),
			"--cache-redis-password-file", pw, "--cache-redis-ca-cert", cache.TLS.CA}, "--cache-redis-client-cert"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out := runBinary(t, 20*time.Second, append([]string{"consume", "--redis", feedRedis.URL(), "--feed", "cachefeed", "--group", "cache2"}, tt.args...)...)
			if code == 0 || !strings.Contains(out, tt.want) {
				t.Fatalf("exit %d, want an error with %q:\n%s", code, tt.want, out)
			}
			t.Logf("%s", lastLine(out))
		})
	}
}
