package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
	"github.com/es-changefeed/es-changefeed/tests/testcert"
)

// Distinctive secrets: none may ever show in the binary's output.
const (
	secPassword = "Pw-q7Zr2-SECRET-one"
	secWrongPW  = "Pw-x4Lm9-SECRET-two"
	secKeyID    = "kid-AAAA1111"
	secKey      = "Key-b8Tn5-SECRET-three"
	secWrongKey = "Key-c3Vw7-SECRET-four"
	// setup credentials, used by the test itself to write documents
	adminUser, adminPW = "admin", "admin-pw"
)

var secrets = []string{secPassword, secWrongPW, secKey, secWrongKey,
	base64.StdEncoding.EncodeToString([]byte(secKeyID + ":" + secKey)),
	base64.StdEncoding.EncodeToString([]byte(secKeyID + ":" + secWrongKey))}

// noSecrets fails the test if out shows a secret.
func noSecrets(tb testing.TB, out string) {
	tb.Helper()
	for _, s := range secrets {
		if strings.Contains(out, s) {
			tb.Errorf("the output shows the secret %q:\n%s", s, out)
		}
	}
}

// secureDo is httpDo for a TLS emulator: it trusts caPEM, presents
// clientCert when given, and authenticates as the setup user.
func secureDo(tb testing.TB, c *esemu.Cluster, caPEM []byte, clientCert *tls.Certificate, method, path, body string) []byte {
	tb.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tc := &tls.Config{RootCAs: pool}
	if clientCert != nil {
		tc.Certificates = []tls.Certificate{*clientCert}
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	defer cl.CloseIdleConnections()
	req, err := http.NewRequest(method, c.URL()+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth(adminUser, adminPW)
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

// seedDocs creates index "secure" with n documents and returns id -> source.
func seedDocs(tb testing.TB, c *esemu.Cluster, caPEM []byte, clientCert *tls.Certificate, n int) map[string]string {
	tb.Helper()
	secureDo(tb, c, caPEM, clientCert, "PUT", "/secure", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`)
	want := map[string]string{}
	for i := 0; i < n; i++ {
		id, src := fmt.Sprintf("doc-%d", i), fmt.Sprintf(`{"n":%d}`, i)
		secureDo(tb, c, caPEM, clientCert, "PUT", "/secure/_doc/"+id+"?refresh=true", src)
		want[id] = src
	}
	return want
}

// waitMirrored waits until the feed's stream holds want (id -> source).
func waitMirrored(tb testing.TB, p *proc, srv *redistest.Server, feedName string, want map[string]string) {
	tb.Helper()
	rdb := srv.Client(tb)
	stream := redisx.NewKeys(feedName).Events()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if n, _ := rdb.XLen(context.Background(), stream).Result(); n >= int64(len(want)) {
			break
		}
		if time.Now().After(deadline) || p.cmd.ProcessState != nil {
			tb.Fatalf("the relay did not mirror %d documents:\n%s", len(want), p.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := map[string]string{}
	for _, e := range entries(tb, rdb, stream) {
		got[e.ID] = string(e.Source)
	}
	if !reflect.DeepEqual(got, want) {
		tb.Fatalf("stream %v, want %v", got, want)
	}
}

// TestCLI_SecuredCluster: the relay follows a TLS cluster with basic auth
// (password from a file), with an API key (encoded, from the environment;
// id:key, from a flag), with a client certificate, and an OpenSearch in
// compatibility mode; it logs what it connected to, and never a secret.
func TestCLI_SecuredCluster(t *testing.T) {
	c := cluster(t, esemu.Config{TLS: true, ClusterName: "vault",
		Users:   map[string]string{adminUser: adminPW, "relay": secPassword},
		APIKeys: map[string]string{secKeyID: secKey}})
	ca := writeFile(t, "ca.pem", c.CACertPEM())
	want := seedDocs(t, c, c.CACertPEM(), nil, 5)
	srv := redistest.Start(t)
	run := func(feedName string, extra ...string) []string {
		return append([]string{"run", "--es", c.URL(), "--es-ca-cert", ca, "--redis", srv.URL(), "--feed", feedName,
			"--index", "secure", "--poll-interval", "20ms"}, extra...)
	}
	encoded := base64.StdEncoding.EncodeToString([]byte(secKeyID + ":" + secKey))
	tests := []struct {
		name string
		env  []string
		args []string
	}{
		{"basic auth, password file", nil, run("basic", "--es-user", "relay", "--es-password-file", writeFile(t, "pw", []byte(secPassword+"\n")))},
		{"user in the URL, password from the environment", []string{"ESCF_ES_PASSWORD=" + secPassword},
			append([]string{"run", "--es", strings.Replace(c.URL(), "https://", "https://relay@", 1)}, run("url-user")[3:]...)},
		{"basic auth, password from the environment", []string{"ESCF_ES_USER=relay", "ESCF_ES_PASSWORD=" + secPassword}, run("basic-env")},
		{"API key, encoded, from the environment", []string{"ESCF_ES_API_KEY=" + encoded}, run("apikey-env")},
		{"API key id:key as a flag", nil, run("apikey-flag", "--es-api-key", secKeyID+":"+secKey)},
		{"API key file", nil, run("apikey-file", "--es-api-key-file", writeFile(t, "key", []byte(encoded+"\n")))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startBinaryWithEnv(t, tt.env, tt.args...)
			waitMirrored(t, p, srv, tt.args[8], want)
			out := p.out.String()
			if !strings.Contains(out, `msg="connected to Elasticsearch `+esemu.FlavorES9.Version()+`" cluster=vault`) {
				t.Errorf("no line saying what the relay connected to:\n%s", out)
			}
			noSecrets(t, out)
		})
	}

	t.Run("client certificate", func(t *testing.T) {
		serverCA, clientCA := testcert.NewCA(t, "server CA"), testcert.NewCA(t, "client CA")
		serverCert, _, _ := serverCA.Sign(t, testcert.Leaf{})
		clientCert, certPEM, keyPEM := clientCA.Sign(t, testcert.Leaf{Client: true, CommonName: "relay"})
		m := cluster(t, esemu.Config{TLS: true, Certificate: &serverCert, ClientCAPEM: clientCA.PEM(),
			Users: map[string]string{adminUser: adminPW, "relay": secPassword}})
		want := seedDocs(t, m, serverCA.PEM(), &clientCert, 3)
		p := startBinary(t, "run", "--es", m.URL(), "--es-ca-cert", writeFile(t, "server-ca.pem", serverCA.PEM()),
			"--es-client-cert", writeFile(t, "client.pem", certPEM), "--es-client-key", writeFile(t, "client.key", keyPEM),
			"--es-user", "relay", "--es-password", secPassword,
			"--redis", srv.URL(), "--feed", "mtls", "--index", "secure", "--poll-interval", "20ms")
		waitMirrored(t, p, srv, "mtls", want)
		noSecrets(t, p.out.String())
	})

	t.Run("OpenSearch in compatibility mode", func(t *testing.T) {
		o := cluster(t, esemu.Config{Flavor: esemu.FlavorOpenSearch2, Version: "7.10.2", TLS: true,
			Users: map[string]string{adminUser: adminPW, "relay": secPassword}})
		want := seedDocs(t, o, o.CACertPEM(), nil, 3)
		p := startBinary(t, "run", "--es", o.URL(), "--es-ca-cert", writeFile(t, "os-ca.pem", o.CACertPEM()),
			"--es-user", "relay", "--es-password", secPassword, "--deletes", "--delete-scan-interval", "50ms", "--delete-scan-budget", "1",
			"--redis", srv.URL(), "--feed", "compat", "--index", "secure", "--poll-interval", "20ms")
		waitMirrored(t, p, srv, "compat", want)
		if out := p.out.String(); !strings.Contains(out, `msg="connected to OpenSearch (compatibility mode: reports version 7.10.2)"`) {
			t.Errorf("no line saying it is OpenSearch in compatibility mode:\n%s", out)
		}
	})

	t.Run("--es-insecure warns", func(t *testing.T) {
		p := startBinary(t, "run", "--es", c.URL(), "--es-insecure", "--es-user", "relay", "--es-password", secPassword,
			"--redis", srv.URL(), "--feed", "insecure", "--index", "secure", "--poll-interval", "20ms")
		waitMirrored(t, p, srv, "insecure", want)
		var warn string
		for _, line := range strings.Split(p.out.String(), "\n") {
			if strings.Contains(line, "certificate verification is off") {
				warn = line
			}
		}
		for _, s := range []string{"level=WARN", "can be intercepted", "flag=--es-insecure", "urls=" + c.URL()} {
			if !strings.Contains(warn, s) {
				t.Errorf("the warning %q does not say %q:\n%s", warn, s, p.out)
			}
		}
		noSecrets(t, p.out.String())
	})

	t.Run("bulk sink over TLS with an API key", func(t *testing.T) {
		p := startBinary(t, "consume", "--redis", srv.URL(), "--feed", "apikey-flag", "--group", "g", "--sink", "bulk",
			"--bulk-es", c.URL(), "--bulk-ca-cert", ca, "--bulk-api-key", encoded, "--bulk-index", "copy-{index}", "--shutdown-timeout", "1s")
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, _ := httpDoTLS(t, c, "/copy-secure/_count")
			if code == 200 {
				break
			}
			if time.Now().After(deadline) || p.cmd.ProcessState != nil {
				t.Fatalf("the bulk sink did not write copy-secure:\n%s", p.out)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if out := p.out.String(); !strings.Contains(out, "bulk sink: connected to Elasticsearch "+esemu.FlavorES9.Version()) {
			t.Errorf("no line saying what the sink connected to:\n%s", out)
		}
		noSecrets(t, p.out.String())
	})
}

// httpDoTLS is a GET as the setup user to a TLS emulator that uses its own CA.
func httpDoTLS(tb testing.TB, c *esemu.Cluster, path string) (int, []byte) {
	tb.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CACertPEM())
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer cl.CloseIdleConnections()
	req, _ := http.NewRequest("GET", c.URL()+path, nil)
	req.SetBasicAuth(adminUser, adminPW)
	resp, err := cl.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestCLI_SecurityErrors: each TLS or credential problem stops the binary
// with one line naming the cause (and the flag to fix), writes nothing to
// Redis, and shows no secret, whatever the failure.
func TestCLI_SecurityErrors(t *testing.T) {
	users := map[string]string{adminUser: adminPW, "relay": secPassword}
	apiKeys := map[string]string{secKeyID: secKey}
	c := cluster(t, esemu.Config{TLS: true, Users: users, APIKeys: apiKeys})
	ca := writeFile(t, "ca.pem", c.CACertPEM())
	myCA := testcert.NewCA(t, "my CA")
	myCAFile := writeFile(t, "my-ca.pem", myCA.PEM())
	expiredAt := time.Date(2025, 6, 30, 0, 0, 0, 0, time.UTC)
	expiredCert, _, _ := myCA.Sign(t, testcert.Leaf{NotBefore: expiredAt.Add(-90 * 24 * time.Hour), NotAfter: expiredAt})
	expired := cluster(t, esemu.Config{TLS: true, Certificate: &expiredCert, Users: users})
	otherHostCert, _, _ := myCA.Sign(t, testcert.Leaf{Hosts: []string{"es-prod.example.com", "10.20.30.40"}})
	otherHost := cluster(t, esemu.Config{TLS: true, Certificate: &otherHostCert, Users: users})
	clientCA := testcert.NewCA(t, "client CA")
	goodServer, _, _ := myCA.Sign(t, testcert.Leaf{})
	mtls := cluster(t, esemu.Config{TLS: true, Certificate: &goodServer, ClientCAPEM: clientCA.PEM(), Users: users})
	_, strangerPEM, strangerKey := testcert.NewCA(t, "stranger CA").Sign(t, testcert.Leaf{Client: true})
	strangerCert, strangerKeyFile := writeFile(t, "stranger.pem", strangerPEM), writeFile(t, "stranger.key", strangerKey)
	old := cluster(t, esemu.Config{Flavor: esemu.FlavorES7, Version: "7.9.3", Users: users})
	createIndexAs(t, old, "secure")
	plain := cluster(t, esemu.Config{Users: users, APIKeys: apiKeys})
	createIndexAs(t, plain, "secure")
	deadES := "https://" + closedPort(t)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	pwFile := writeFile(t, "pw", []byte(secPassword+"\n"))
	emptyFile := writeFile(t, "empty", []byte("\n"))

	run := func(url string, extra ...string) []string {
		return append([]string{"run", "--es", url, "--redis", srv.URL(), "--index", "secure"}, extra...)
	}
	basic := []string{"--es-user", "relay", "--es-password", secPassword}
	wrongKey := base64.StdEncoding.EncodeToString([]byte(secKeyID + ":" + secWrongKey))
	tests := []struct {
		name     string
		args     []string
		code     int
		contains []string
	}{
		{"wrong CA", run(c.URL(), append(basic, "--es-ca-cert", myCAFile)...), 1,
			[]string{"TLS certificate of " + c.URL() + " is not trusted", `signed by "CN=esemu test CA"`, "--es-ca-cert FILE"}},
		{"expired certificate", run(expired.URL(), append(basic, "--es-ca-cert", myCAFile)...), 1,
			[]string{"is not trusted", "the certificate expired on 2025-06-30T00:00:00Z", "renew the cluster's HTTP certificate"}},
		{"certificate for another host", run(otherHost.URL(), append(basic, "--es-ca-cert", myCAFile)...), 1,
			[]string{"is not trusted", "the certificate is for es-prod.example.com, 10.20.30.40, not 127.0.0.1", "put a name the certificate is valid for in --es"}},
		{"wrong password", run(c.URL(), "--es-ca-cert", ca, "--es-user", "relay", "--es-password", secWrongPW), 1,
			[]string{`refused user "relay"`, "HTTP 401", "unable to authenticate user [relay]", "check --es-user/--es-password"}},
		{"wrong API key", run(c.URL(), "--es-ca-cert", ca, "--es-api-key", wrongKey), 1,
			[]string{"refused the API key", "HTTP 401", "check --es-api-key"}},
		{"wrong API key, id:key from the environment", append(run(c.URL(), "--es-ca-cert", ca), "--log-level", "debug"), 1,
			[]string{"refused the API key", "check --es-api-key"}},
		{"API key that is no API key", run(c.URL(), "--es-ca-cert", ca, "--es-api-key", secWrongKey), 2,
			[]string{"--es-api-key", "neither id:key nor the encoded form"}},
		{"API key and user", run(c.URL(), "--es-ca-cert", ca, "--es-api-key", wrongKey, "--es-user", "relay"), 2,
			[]string{"--es-api-key and --es-user/--es-password (or a user in the URL) are two ways to authenticate"}},
		{"API key and a user in the URL", run(strings.Replace(c.URL(), "https://", "https://relay@", 1), "--es-ca-cert", ca, "--es-api-key", wrongKey), 2,
			[]string{"--es-api-key and --es-user/--es-password (or a user in the URL) are two ways to authenticate"}},
		{"password without a user", run(c.URL(), "--es-ca-cert", ca, "--es-password", secPassword), 2,
			[]string{"--es-password without --es-user: pass the user name too"}},
		{"password and password file", run(c.URL(), "--es-user", "relay", "--es-password", secPassword, "--es-password-file", pwFile), 2,
			[]string{"--es-password and --es-password-file are both set"}},
		{"missing password file", run(c.URL(), "--es-user", "relay", "--es-password-file", pwFile+".gone"), 2,
			[]string{"--es-password-file: cannot read " + pwFile + ".gone", "no such file"}},
		{"empty password file", run(c.URL(), "--es-user", "relay", "--es-password-file", emptyFile), 2,
			[]string{"--es-password-file: " + emptyFile + " is empty"}},
		{"empty API key file", run(c.URL(), "--es-api-key-file", emptyFile), 2,
			[]string{"--es-api-key-file: " + emptyFile + " is empty"}},
		{"no client certificate", run(mtls.URL(), append(basic, "--es-ca-cert", myCAFile)...), 1,
			[]string{"requires a client certificate and none is configured", "--es-client-cert FILE and --es-client-key FILE"}},
		{"client certificate of another CA", run(mtls.URL(), append(basic, "--es-ca-cert", myCAFile, "--es-client-cert", strangerCert, "--es-client-key", strangerKeyFile)...), 1,
			[]string{"the configured one is not"}},
		{"client certificate without key", run(mtls.URL(), "--es-client-cert", strangerCert), 2,
			[]string{"--es-client-cert and --es-client-key go together"}},
		{"client key that does not match", run(mtls.URL(), "--es-client-cert", strangerCert, "--es-client-key", myCAFile), 2,
			[]string{"--es-client-cert " + strangerCert + " with --es-client-key " + myCAFile}},
		{"unreachable, with a password", run(deadES, basic...), 1, []string{"cannot reach Elasticsearch"}},
		{"unreachable, with an API key", run(deadES, "--es-api-key", secKeyID+":"+secKey), 1, []string{"cannot reach Elasticsearch"}},
		{"Elasticsearch too old", run(old.URL(), basic...), 1,
			[]string{old.URL() + ": unsupported version: the cluster is Elasticsearch 7.9.3, and es-changefeed needs Elasticsearch 7.10.0 or later"}},
		{"plain HTTP, wrong password from a file", run(plain.URL(), "--es-user", "admin", "--es-password-file", pwFile, "--log-level", "debug"), 1,
			[]string{`refused user "admin"`}},
		{"bulk sink, expired certificate", []string{"consume", "--redis", srv.URL(), "--group", "g", "--sink", "bulk", "--bulk-es", expired.URL(),
			"--bulk-ca-cert", myCAFile, "--bulk-user", "relay", "--bulk-password", secPassword}, 1,
			[]string{"--sink bulk", "the certificate expired on 2025-06-30", "renew"}},
		{"bulk sink, wrong API key", []string{"consume", "--redis", srv.URL(), "--group", "g", "--sink", "bulk", "--bulk-es", c.URL(),
			"--bulk-ca-cert", ca, "--bulk-api-key", wrongKey}, 1,
			[]string{"--sink bulk", "refused the API key", "check --bulk-api-key"}},
		{"bulk sink, API key with user", []string{"consume", "--redis", srv.URL(), "--group", "g", "--sink", "bulk", "--bulk-es", c.URL(),
			"--bulk-api-key", wrongKey, "--bulk-user", "relay"}, 2,
			[]string{"--bulk-api-key and --bulk-user/--bulk-password (or a user in the URL) are two ways"}},
		{"status: --es-api-key without --es", []string{"status", "--redis", srv.URL(), "--es-api-key", wrongKey}, 2,
			[]string{"--es-api-key needs --es"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var env []string
			if strings.Contains(tt.name, "from the environment") {
				env = []string{"ESCF_ES_API_KEY=" + secKeyID + ":" + secWrongKey}
			}
			p := startBinaryWithEnv(t, env, tt.args...)
			done := make(chan struct{})
			go func() { _ = p.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("did not exit:\n%s", p.out)
			}
			out := p.out.String()
			if code := p.cmd.ProcessState.ExitCode(); code != tt.code {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tt.code, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			for _, want := range tt.contains {
				if !strings.Contains(last, want) {
					t.Errorf("error line %q does not contain %q", last, want)
				}
			}
			noSecrets(t, out)
			t.Logf("%s", last)
			if dbs := keyspace(t, rdb); len(dbs) != 0 {
				t.Errorf("the Redis holds keys after a refused start: %v", dbs)
			}
		})
	}
}

// createIndexAs creates a one-shard index on a plain-HTTP emulator with
// the setup user.
func createIndexAs(tb testing.TB, c *esemu.Cluster, name string) {
	tb.Helper()
	req, _ := http.NewRequest("PUT", c.URL()+"/"+name, strings.NewReader(`{"settings":{"number_of_shards":1,"number_of_replicas":0}}`))
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth(adminUser, adminPW)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		tb.Fatalf("create %s: HTTP %d", name, resp.StatusCode)
	}
}
