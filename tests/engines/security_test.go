package engines

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// TestNewCredentials: the files a client needs are written (owner-only),
// the node certificate is valid for 127.0.0.1 under the CA, the client
// certificate names ClientCertUser, and each password matches its hash.
func TestNewCredentials(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sec")
	cr, err := newCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{FileCA, FileClientCert, FileClientKey}
	for _, u := range Users() {
		want = append(want, PasswordFile(u))
	}
	for _, name := range want {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	if got, want := PasswordFile(UserRelay), "relay.password"; got != want {
		t.Errorf("PasswordFile(%s) = %s, want %s", UserRelay, got, want)
	}
	block, _ := pem.Decode(cr.nodePEM)
	node, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.Verify(x509.VerifyOptions{Roots: cr.pool, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("node certificate for 127.0.0.1: %v", err)
	}
	if _, err := node.Verify(x509.VerifyOptions{Roots: cr.pool, DNSName: "es.example.com"}); err == nil {
		t.Error("node certificate verifies for es.example.com too")
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, FileClientCert), filepath.Join(dir, FileClientKey))
	if err != nil {
		t.Fatal(err)
	}
	client, _ := x509.ParseCertificate(pair.Certificate[0])
	if got := client.Subject.String(); got != "CN="+ClientCertUser {
		t.Errorf("client certificate subject %s, want CN=%s", got, ClientCertUser)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: cr.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	for _, u := range Users() {
		b, _ := os.ReadFile(filepath.Join(dir, PasswordFile(u)))
		pw := strings.TrimSuffix(string(b), "\n")
		if pw == "" || pw != cr.passwords[u] {
			t.Errorf("%s: file holds %q, want the password", u, pw)
		}
		if err := bcrypt.CompareHashAndPassword([]byte(cr.hashes[u]), []byte(pw)); err != nil {
			t.Errorf("%s: hash: %v", u, err)
		}
	}
}

func TestArtifactName(t *testing.T) {
	for _, tc := range []struct{ jar, want string }{
		{"netty-codec-4.1.125.Final.jar", "netty-codec"},
		{"transport-netty4-client-2.19.4.jar", "transport-netty4-client"},
		{"guava-33.4.0-jre.jar", "guava"},
		{"scala-java8-compat_3-1.0.2.jar", "scala-java8-compat_3"},
		{"bcprov-jdk18on-1.82.jar", "bcprov-jdk18on"},
		{"plain.jar", "plain"},
	} {
		if got := artifactName(tc.jar); got != tc.want {
			t.Errorf("artifactName(%s) = %s, want %s", tc.jar, got, tc.want)
		}
	}
}

// secReq is one request to a secured cluster: auth is "" (none),
// "user:password", or "ApiKey <encoded>"; cert a client certificate.
type secReq struct {
	client *http.Client
	auth   string
}

func (r secReq) do(tb testing.TB, method, url, body string) (int, http.Header, []byte) {
	tb.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key, ok := strings.CutPrefix(r.auth, "ApiKey "); ok {
		req.Header.Set("Authorization", "ApiKey "+key)
	} else if u, p, ok := strings.Cut(r.auth, ":"); ok {
		req.SetBasicAuth(u, p)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		tb.Fatalf("%s %s as %q: %v", method, url, strings.SplitN(r.auth, ":", 2)[0], err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// TestCluster_Secured starts a secured node (Config.Security) and checks
// the engine's own answers: no credentials or a wrong password get 401
// with a Basic challenge; the admin may do anything; the relay's user
// reads, refreshes and monitors but may not create an index or write
// (403); the bulk sink's user writes but may not read the source; the
// client certificate authenticates as ClientCertUser; an API key (where
// the engine has them) reads and may not write; plain http:// and a
// client without the CA get no answer.
func TestCluster_Secured(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sec")
	c := StartTB(t, Config{Engine: testEngine(t), Security: dir})
	t.Logf("backend: %s secured by %s at %s", c.Engine(), c.SecurityKind(), c.URL())
	if !strings.HasPrefix(c.URL(), "https://127.0.0.1:") {
		t.Fatalf("URL %s, want https://127.0.0.1:…", c.URL())
	}
	if c.SecurityKind() == TLSProxy {
		checkTLSProxyCluster(t, c, dir) // elasticsearch-7: tlsproxy_test.go
		return
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	as := func(user string) secReq {
		return secReq{client: c.HTTPClient(), auth: user + ":" + read(PasswordFile(user))}
	}
	u := c.URL()
	check := func(r secReq, method, path, body string, want int) []byte {
		t.Helper()
		st, _, b := r.do(t, method, u+path, body)
		if st != want {
			t.Errorf("%s %s as %q: HTTP %d, want %d: %s", method, path, strings.SplitN(r.auth, ":", 2)[0], st, want, b)
		}
		return b
	}

	anon := secReq{client: c.HTTPClient()}
	st, h, b := anon.do(t, "GET", u+"/_cluster/health", "")
	if st != http.StatusUnauthorized || !strings.Contains(h.Get("WWW-Authenticate"), "Basic") {
		t.Errorf("no credentials: HTTP %d, WWW-Authenticate %q, want 401 with a Basic challenge: %s", st, h.Get("WWW-Authenticate"), b)
	}
	check(secReq{client: c.HTTPClient(), auth: UserRelay + ":wrong"}, "GET", "/_cluster/health", "", http.StatusUnauthorized)

	admin, relay, bulk := as(UserAdmin), as(UserRelay), as(UserBulk)
	check(admin, "PUT", "/sec-src", `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`, http.StatusOK)
	check(admin, "PUT", "/sec-src/_doc/1?refresh=true", `{"n":1}`, http.StatusCreated)

	// The relay's calls (docs/SECURITY.md), and what it may not do.
	check(relay, "GET", "/", "", http.StatusOK)
	check(relay, "GET", "/_resolve/index/sec-*", "", http.StatusOK)
	check(relay, "GET", "/sec-src/_settings", "", http.StatusOK)
	check(relay, "GET", "/sec-src/_stats/get?level=shards", "", http.StatusOK)
	check(relay, "GET", "/_cluster/state/metadata/sec-src", "", http.StatusOK)
	check(relay, "GET", "/sec-src/_mapping", "", http.StatusOK)
	check(relay, "POST", "/sec-src/_refresh", "", http.StatusOK)
	if b := check(relay, "POST", "/sec-src/_search?preference=_shards:0", `{"seq_no_primary_term":true,"query":{"range":{"_seq_no":{"gt":-1}}}}`, http.StatusOK); !strings.Contains(string(b), `"_seq_no":0`) {
		t.Errorf("the relay's search: %s, want the document with _seq_no 0", b)
	}
	check(relay, "PUT", "/sec-other", "", http.StatusForbidden)
	check(relay, "PUT", "/sec-src/_doc/2", `{"n":2}`, http.StatusForbidden)

	// The bulk sink writes, and does not read the source.
	if b := check(bulk, "POST", "/_bulk", "{\"index\":{\"_index\":\"copy-sec\",\"_id\":\"1\",\"version\":5,\"version_type\":\"external\"}}\n{\"n\":1}\n", http.StatusOK); !strings.Contains(string(b), `"errors":false`) {
		t.Errorf("the bulk user's _bulk: %s, want no errors", b)
	}
	check(bulk, "POST", "/sec-src/_search", `{}`, http.StatusForbidden)
	check(as(UserStatus), "GET", "/sec-src/_stats/get?level=shards", "", http.StatusOK)
	check(as(UserStatus), "POST", "/sec-src/_search", `{}`, http.StatusForbidden)

	// The client certificate alone authenticates as ClientCertUser.
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, FileClientCert), filepath.Join(dir, FileClientKey))
	if err != nil {
		t.Fatal(err)
	}
	tc := c.creds.tlsConfig()
	tc.Certificates = []tls.Certificate{pair}
	certOnly := secReq{client: &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}}
	who := "/_plugins/_security/authinfo"
	if c.Engine().Product == "elasticsearch" {
		who = "/_security/_authenticate"
	}
	if b := check(certOnly, "GET", who, "", http.StatusOK); !regexp.MustCompile(`"user(_)?name":"` + ClientCertUser + `"`).Match(b) {
		t.Errorf("GET %s with the client certificate: %s, want user %s", who, b, ClientCertUser)
	}
	check(certOnly, "POST", "/sec-src/_search", `{}`, http.StatusOK)
	check(certOnly, "PUT", "/sec-src/_doc/3", `{"n":3}`, http.StatusForbidden)

	if c.Engine().Product == "elasticsearch" {
		key := secReq{client: c.HTTPClient(), auth: "ApiKey " + read(FileAPIKey)}
		check(key, "POST", "/sec-src/_search", `{}`, http.StatusOK)
		check(key, "PUT", "/sec-src/_doc/4", `{"n":4}`, http.StatusForbidden)
	} else if _, err := os.Stat(filepath.Join(dir, FileAPIKey)); err == nil {
		t.Errorf("%s has no API keys, yet %s was written", c.Engine(), FileAPIKey)
	}

	// No answer over plain HTTP, nor to a client without the CA.
	plain := strings.Replace(u, "https://", "http://", 1)
	if resp, err := http.Get(plain + "/"); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("GET %s/ over plain HTTP: HTTP %d", plain, resp.StatusCode)
		}
	}
	if _, err := http.Get(u + "/"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("GET %s/ without the CA: %v, want a certificate error", u, err)
	}
}

// TestRoles: every role of the table reaches both products' files, each
// user of a role is a user of the cluster, and Without removes exactly
// one grant.
func TestRoles(t *testing.T) {
	for _, product := range []string{"elasticsearch", "opensearch"} {
		y := string(rolesYAML(product))
		for _, r := range Roles(product) {
			if !strings.Contains(y, r.Name+": {") {
				t.Errorf("%s roles.yml has no %s:\n%s", product, r.Name, y)
			}
			var body map[string]any
			if err := json.Unmarshal(r.Body(product), &body); err != nil {
				t.Errorf("%s %s: body %s: %v", product, r.Name, r.Body(product), err)
			}
			for _, u := range r.Users {
				if !slices.Contains(Users(), u) {
					t.Errorf("%s %s: user %s is not a user of the cluster", product, r.Name, u)
				}
			}
			for i, g := range r.Grants {
				w := r.Without(i)
				if len(w.Grants) != len(r.Grants)-1 || slices.Contains(w.Grants, g) {
					t.Errorf("%s %s without %s: %v", product, r.Name, g, w.Grants)
				}
				if product == "opensearch" && g.Action == "" {
					t.Errorf("%s %s: %s names no action a refusal would name", product, r.Name, g)
				}
			}
		}
	}
	es := string(Roles("elasticsearch")[0].Body("elasticsearch"))
	if want := `{"cluster":["monitor"],"indices":[{"names":["*"],"privileges":["read","monitor","view_index_metadata","maintenance"],"allow_restricted_indices":false}]}`; es != want {
		t.Errorf("escf_relay on Elasticsearch: %s, want %s", es, want)
	}
}

// TestRoles_AreTheDocs: the role bodies docs/SECURITY.md shows (PUT
// /_security/role/escf_… and PUT /_plugins/_security/api/roles/escf_…)
// grant what the table does, the one the secured nodes are started with
// and TestSecurity_LeastPrivileges proves. The docs name example indices
// ("orders", "logs-*") where the table has "*".
func TestRoles_AreTheDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/SECURITY.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	pattern := func(names []string) string {
		if len(names) == 1 && (names[0] == "copy-*" || names[0] == "escf-applied") {
			return names[0]
		}
		return "*"
	}
	for _, product := range []string{"elasticsearch", "opensearch"} {
		prefix := "PUT /_security/role/"
		if product == "opensearch" {
			prefix = "PUT /_plugins/_security/api/roles/"
		}
		for _, r := range Roles(product) {
			i := strings.Index(doc, prefix+r.Name+"\n")
			if i < 0 {
				t.Errorf("docs/SECURITY.md shows no %s%s", prefix, r.Name)
				continue
			}
			body := doc[i+len(prefix+r.Name+"\n"):]
			body = body[:strings.Index(body, "```")]
			var d struct {
				Cluster      []string `json:"cluster"`
				ClusterPerms []string `json:"cluster_permissions"`
				Indices      []struct {
					Names      []string `json:"names"`
					Privileges []string `json:"privileges"`
				} `json:"indices"`
				IndexPerms []struct {
					Patterns []string `json:"index_patterns"`
					Actions  []string `json:"allowed_actions"`
				} `json:"index_permissions"`
			}
			if err := json.Unmarshal([]byte(body), &d); err != nil {
				t.Errorf("docs/SECURITY.md's %s%s: %v\n%s", prefix, r.Name, err, body)
				continue
			}
			var got []string
			for _, p := range append(d.Cluster, d.ClusterPerms...) {
				got = append(got, Grant{Privilege: p}.String())
			}
			for _, ix := range d.Indices {
				for _, p := range ix.Privileges {
					got = append(got, Grant{Indices: pattern(ix.Names), Privilege: p}.String())
				}
			}
			for _, ix := range d.IndexPerms {
				for _, p := range ix.Actions {
					got = append(got, Grant{Indices: pattern(ix.Patterns), Privilege: p}.String())
				}
			}
			var want []string
			for _, g := range r.Grants {
				want = append(want, g.String())
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s %s: docs/SECURITY.md grants %q, the table %q", product, r.Name, got, want)
			}
		}
	}
}
