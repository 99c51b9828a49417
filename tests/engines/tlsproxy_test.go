package engines

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestSecurityKindOf: every line of the engine table starts secured,
// with its plugin where HasSecurity, else behind the TLS proxy; Validate
// takes Security on each.
func TestSecurityKindOf(t *testing.T) {
	for _, name := range Names() {
		got := SecurityKindOf(name)
		want := EngineSecurity
		if name == "elasticsearch-7" {
			want = TLSProxy
		}
		if got != want {
			t.Errorf("SecurityKindOf(%s) = %v, want %v", name, got, want)
		}
		if HasSecurity(name) != (got == EngineSecurity) {
			t.Errorf("HasSecurity(%s) = %v with SecurityKind %v", name, HasSecurity(name), got)
		}
		if err := (Config{Engine: name, Nodes: 1, Security: "sec"}).Validate(); err != nil {
			t.Errorf("%s: Validate() = %v", name, err)
		}
	}
	if got, want := strings.Join(securedEngines(), ", "), "opensearch-2, opensearch-3, elasticsearch-7 (TLS proxy), elasticsearch-8, elasticsearch-9"; got != want {
		t.Errorf("securedEngines() = %s, want %s", got, want)
	}
	if got := SecurityKindOf("solr-9"); got != NoSecurity {
		t.Errorf("SecurityKindOf(solr-9) = %v, want NoSecurity", got)
	}
	if got, want := TLSProxy.String(), "TLS proxy (client only): roles are not enforced"; got != want {
		t.Errorf("TLSProxy.String() = %q, want %q", got, want)
	}
}

// TestTLSProxy runs haproxy (no JVM) in front of a plain Go server and
// checks what checkTLSProxy checks on a real node; then that stop ends
// haproxy and frees its port.
func TestTLSProxy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sec")
	cr, err := newCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"path":"` + r.URL.Path + `"}`))
	}))
	defer backend.Close()
	backendPort, _ := strconv.Atoi(backend.URL[strings.LastIndex(backend.URL, ":")+1:])
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	p, err := startTLSProxy(context.Background(), filepath.Join(t.TempDir(), "proxy"), cr, []int{port}, []int{backendPort})
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	checkTLSProxy(t, p.url(0), "/_cluster/health", dir, cr.tlsConfig())

	// A port taken by another process: errPortTaken, which Start tries
	// again on other ports.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	if _, err := startTLSProxy(context.Background(), filepath.Join(t.TempDir(), "taken"), cr, []int{taken}, []int{backendPort}); !errors.Is(err, errPortTaken) {
		t.Errorf("haproxy on a taken port: %v, want errPortTaken", err)
	}

	pid := p.cmd.Process.Pid
	p.stop()
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("haproxy (pid %d) still exists after stop", pid)
	}
	if _, err := http.Get(p.url(0)); err == nil {
		t.Errorf("%s answers after stop", p.url(0))
	}
}

// checkTLSProxy checks the TLS proxy at url (https) with the credentials
// in dir: no credentials or a wrong password get 401 with a Basic
// challenge; every user's password and the client certificate alone
// (as ClientCertUser) get through to the node's answer to path; a client
// certificate of another CA, plain http:// and a client without the CA
// get no answer.
func checkTLSProxy(t *testing.T, url, path, dir string, trust *tls.Config) {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: trust.Clone()}}
	// withCert sends the client certificate in certDir whatever CAs the
	// server asks for (Go's Certificates would send none of another CA).
	withCert := func(certDir string) *http.Client {
		pair, err := tls.LoadX509KeyPair(filepath.Join(certDir, FileClientCert), filepath.Join(certDir, FileClientKey))
		if err != nil {
			t.Fatal(err)
		}
		tc := trust.Clone()
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}

	st, h, b := secReq{client: client}.do(t, "GET", url+path, "")
	if st != http.StatusUnauthorized || h.Get("WWW-Authenticate") != `Basic realm="es-changefeed"` {
		t.Errorf("no credentials: HTTP %d, WWW-Authenticate %q, want 401 with a Basic challenge: %s", st, h.Get("WWW-Authenticate"), b)
	}
	t.Logf("no credentials: HTTP %d, WWW-Authenticate: %s, Content-Type: %s, body %q", st, h.Get("WWW-Authenticate"), h.Get("Content-Type"), b)
	if st, h, b := (secReq{client: client, auth: UserRelay + ":wrong"}).do(t, "GET", url+path, ""); st != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic ") {
		t.Errorf("a wrong password: HTTP %d, WWW-Authenticate %q, want 401 with a Basic challenge: %s", st, h.Get("WWW-Authenticate"), b)
	}
	if st, _, b := (secReq{client: client, auth: "nobody:" + read(PasswordFile(UserAdmin))}).do(t, "GET", url+path, ""); st != http.StatusUnauthorized {
		t.Errorf("an unknown user with the admin's password: HTTP %d, want 401: %s", st, b)
	}
	for _, u := range Users() {
		st, h, b := secReq{client: client, auth: u + ":" + read(PasswordFile(u))}.do(t, "GET", url+path, "")
		if st != http.StatusOK || h.Get(ProxyUserHeader) != u {
			t.Errorf("as %s: HTTP %d, %s %q, want 200 as %s: %s", u, st, ProxyUserHeader, h.Get(ProxyUserHeader), u, b)
		}
	}

	// The client certificate alone is ClientCertUser; one of another CA
	// ends the handshake.
	if st, h, b := (secReq{client: withCert(dir)}).do(t, "GET", url+path, ""); st != http.StatusOK || h.Get(ProxyUserHeader) != ClientCertUser {
		t.Errorf("the client certificate alone: HTTP %d, %s %q, want 200 as %s: %s", st, ProxyUserHeader, h.Get(ProxyUserHeader), ClientCertUser, b)
	}
	other := filepath.Join(t.TempDir(), "other-ca")
	if _, err := newCredentials(other); err != nil {
		t.Fatal(err)
	}
	if resp, err := withCert(other).Get(url + path); err == nil {
		resp.Body.Close()
		t.Errorf("a client certificate of another CA: HTTP %d, want the handshake refused", resp.StatusCode)
	} else {
		t.Logf("a client certificate of another CA: %v", err)
	}

	// No answer over plain HTTP, nor to a client without the CA.
	plain := strings.Replace(url, "https://", "http://", 1)
	if resp, err := http.Get(plain + path); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("GET %s%s over plain HTTP: HTTP %d", plain, path, resp.StatusCode)
		}
	} else {
		t.Logf("plain HTTP: %v", err)
	}
	if _, err := http.Get(url + path); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("GET %s%s without the CA: %v, want a certificate error", url, path, err)
	}
}

// checkTLSProxyCluster is TestCluster_Secured on a cluster behind the TLS
// proxy (elasticsearch-7): checkTLSProxy's checks on the node's answers,
// the node's own answer to GET / through the proxy, the admin's and the
// relay's calls, and, as its label says, no roles: the relay's user may
// write. No api-key is written.
func checkTLSProxyCluster(t *testing.T, c *Cluster, dir string) {
	t.Helper()
	if got := c.SecurityKind(); got != TLSProxy {
		t.Fatalf("SecurityKind() = %v, want %v", got, TLSProxy)
	}
	checkTLSProxy(t, c.URL(), "/_cluster/health", dir, c.creds.tlsConfig())

	as := func(user string) secReq {
		return secReq{client: c.HTTPClient(), auth: user + ":" + c.Password(user)}
	}
	check := func(r secReq, method, path, body string, want int) []byte {
		t.Helper()
		st, _, b := r.do(t, method, c.URL()+path, body)
		if st != want {
			t.Errorf("%s %s as %q: HTTP %d, want %d: %s", method, path, strings.SplitN(r.auth, ":", 2)[0], st, want, b)
		}
		return b
	}
	admin, relay := as(UserAdmin), as(UserRelay)
	var root struct {
		Version struct{ Number string } `json:"version"`
	}
	if b := check(relay, "GET", "/", "", http.StatusOK); json.Unmarshal(b, &root) != nil || root.Version.Number != c.Engine().Version {
		t.Errorf("GET / through the proxy: %s, want the node's version %s", b, c.Engine().Version)
	}
	check(admin, "PUT", "/sec-src", `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`, http.StatusOK)
	check(admin, "PUT", "/sec-src/_doc/1?refresh=true", `{"n":1}`, http.StatusCreated)
	if b := check(relay, "POST", "/sec-src/_search?preference=_shards:0", `{"seq_no_primary_term":true,"query":{"range":{"_seq_no":{"gt":-1}}}}`, http.StatusOK); !strings.Contains(string(b), `"_seq_no":0`) {
		t.Errorf("the relay's search: %s, want the document with _seq_no 0", b)
	}
	// What "roles are not enforced" means: the engine's security would
	// answer 403 here.
	check(relay, "PUT", "/sec-src/_doc/2", `{"n":2}`, http.StatusCreated)
	if _, err := os.Stat(filepath.Join(dir, FileAPIKey)); err == nil {
		t.Errorf("the TLS proxy has no API keys, yet %s was written", FileAPIKey)
	}
}
