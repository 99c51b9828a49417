package engines

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// The users a secured cluster has (Config.Security). Each one's password is
// in <Security>/<file>; the roles are the least privileges of
// docs/SECURITY.md, on every index ("*": the tests name their own).
const (
	UserAdmin     = "admin"          // every privilege (superuser, all_access)
	UserRelay     = "escf-relay"     // the relay's role: run, resync
	UserBulk      = "escf-bulk"      // the bulk sink's role
	UserBootstrap = "escf-bootstrap" // consume --bootstrap's reader: the relay's role
	UserStatus    = "escf-status"    // status --es: monitor only
)

// ClientCertUser is the user the client certificate (client.pem) is
// mapped to: its subject is CN=escf-relay, so it has the relay's role.
const ClientCertUser = UserRelay

// The files Start writes into Config.Security.
const (
	FileCA            = "ca.pem"
	FileClientCert    = "client.pem"
	FileClientKey     = "client-key.pem"
	FileAPIKey        = "api-key" // Elasticsearch only: encoded, the relay's privileges
	FileAdminPassword = "admin.password"
)

// PasswordFile is the file in the security directory holding user's
// password: admin.password, relay.password, bulk.password,
// bootstrap.password, status.password.
func PasswordFile(user string) string {
	return strings.TrimPrefix(user, "escf-") + ".password"
}

// Users are the users of a secured cluster.
func Users() []string { return append([]string(nil), securityUsers...) }

var securityUsers = []string{UserAdmin, UserRelay, UserBulk, UserBootstrap, UserStatus}

// securityPlugin says how an engine line gets its security: OpenSearch's
// plugin zip at Version (it is published for fewer versions than the
// server), or Elasticsearch's x-pack jars at the engine's version
// (Version "").
type securityPlugin struct {
	Version string
}

// securityPlugins are the lines with security from Maven Central (see
// ../shared FACTS "Security plugins on Maven Central" and README):
// opensearch-security is published for 2.19.4.0 and 3.4.0.0, not for the
// pinned 2.19.6 and 3.9.0; x-pack-security not for 7.17.
var securityPlugins = map[string]securityPlugin{
	"opensearch-2":    {Version: "2.19.4.0"},
	"opensearch-3":    {Version: "3.4.0.0"},
	"elasticsearch-8": {},
	"elasticsearch-9": {},
}

// HasSecurity reports whether the engine called name can start secured
// (Config.Security): its security plugin is on Maven Central.
func HasSecurity(name string) bool {
	e, err := Lookup(name)
	if err != nil {
		return false
	}
	_, ok := securityPlugins[e.Name]
	return ok
}

func securityOf(e Engine) (securityPlugin, error) {
	p, ok := securityPlugins[e.Name]
	if !ok {
		var have []string
		for _, n := range Names() {
			if _, ok := securityPlugins[n]; ok {
				have = append(have, n)
			}
		}
		return p, fmt.Errorf("%s has no security plugin on Maven Central: security runs on %s", e.Name, strings.Join(have, ", "))
	}
	return p, nil
}

// credentials are what a secured cluster is started with: a CA, the
// nodes' certificate (also the HTTP one), the admin's and a client's
// certificate, and the users' passwords.
type credentials struct {
	dir       string // Config.Security
	caPEM     []byte
	nodePEM   []byte // node certificate, then the CA
	nodeKey   []byte // PKCS#8
	adminPEM  []byte
	adminKey  []byte
	pool      *x509.CertPool
	passwords map[string]string
	hashes    map[string]string // bcrypt
}

// The certificates' subjects. One RDN each: the engines read DN lists
// from comma-separated settings.
const (
	nodeDN   = "CN=escf-node"
	adminDN  = "CN=escf-admin"
	clientCN = ClientCertUser
)

// newCredentials makes the CA, the certificates and the passwords and
// writes the client's files into dir.
func newCredentials(dir string) (*credentials, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cr := &credentials{dir: dir, passwords: map[string]string{}, hashes: map[string]string{}}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "escf test CA " + now.UTC().Format(time.RFC3339)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	cr.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	cr.pool = x509.NewCertPool()
	cr.pool.AddCert(ca)

	leaf := func(cn string, host bool) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		t := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if host {
			// Nodes use it for HTTP and for the transport (both ends).
			t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
			t.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
			t.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, t, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		k, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k}), nil
	}
	if cr.nodePEM, cr.nodeKey, err = leaf(strings.TrimPrefix(nodeDN, "CN="), true); err != nil {
		return nil, err
	}
	if cr.adminPEM, cr.adminKey, err = leaf(strings.TrimPrefix(adminDN, "CN="), false); err != nil {
		return nil, err
	}
	clientPEM, clientKey, err := leaf(clientCN, false)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{FileCA: cr.caPEM, FileClientCert: clientPEM, FileClientKey: clientKey}
	for _, u := range securityUsers {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		pw := "Escf-" + hex.EncodeToString(b) // letters, digits, a symbol: passes password rules
		h, err := bcrypt.GenerateFromPassword([]byte(pw), 10)
		if err != nil {
			return nil, err
		}
		cr.passwords[u], cr.hashes[u] = pw, string(h)
		files[PasswordFile(u)] = []byte(pw + "\n")
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return cr, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// tlsConfig trusts the CA only.
func (cr *credentials) tlsConfig() *tls.Config {
	return &tls.Config{RootCAs: cr.pool, MinVersion: tls.VersionTLS12}
}

// writeNodeConfig writes what node home needs into its config directory
// and returns the node settings that turn security on.
func (cr *credentials) writeNodeConfig(e Engine, cp Classpath, home string) ([]string, error) {
	conf := filepath.Join(home, "config")
	files := map[string][]byte{
		"escf-ca.pem":       cr.caPEM,
		"escf-node.pem":     append(append([]byte{}, cr.nodePEM...), cr.caPEM...),
		"escf-node-key.pem": cr.nodeKey,
	}
	var settings []string
	switch e.Product {
	case "opensearch":
		sec := filepath.Join(conf, "opensearch-security")
		// The plugin's defaults (action groups, tenants, audit, …), then ours.
		defaults := filepath.Join(cp.Dir, "plugin", "config")
		entries, err := os.ReadDir(defaults)
		if err != nil {
			return nil, fmt.Errorf("the security plugin's default config: %w", err)
		}
		for _, d := range entries {
			if strings.HasSuffix(d.Name(), ".yml") {
				b, err := os.ReadFile(filepath.Join(defaults, d.Name()))
				if err != nil {
					return nil, err
				}
				files[filepath.Join("opensearch-security", d.Name())] = b
			}
		}
		for name, b := range cr.openSearchSecurityFiles() {
			files[filepath.Join("opensearch-security", name)] = b
		}
		if err := os.MkdirAll(sec, 0o755); err != nil {
			return nil, err
		}
		settings = []string{
			"plugins.security.ssl.transport.pemcert_filepath=escf-node.pem",
			"plugins.security.ssl.transport.pemkey_filepath=escf-node-key.pem",
			"plugins.security.ssl.transport.pemtrustedcas_filepath=escf-ca.pem",
			"plugins.security.ssl.transport.enforce_hostname_verification=false",
			"plugins.security.ssl.http.enabled=true",
			"plugins.security.ssl.http.pemcert_filepath=escf-node.pem",
			"plugins.security.ssl.http.pemkey_filepath=escf-node-key.pem",
			"plugins.security.ssl.http.pemtrustedcas_filepath=escf-ca.pem",
			"plugins.security.ssl.http.clientauth_mode=OPTIONAL",
			"plugins.security.allow_default_init_securityindex=true",
			"plugins.security.authcz.admin_dn=" + adminDN,
			"plugins.security.nodes_dn=" + nodeDN,
			"plugins.security.audit.type=noop",
			"plugins.security.restapi.roles_enabled=all_access",
		}
	case "elasticsearch":
		for name, b := range cr.elasticsearchFiles() {
			files[name] = b
		}
		settings = []string{
			"xpack.security.enabled=true",
			"xpack.security.http.ssl.enabled=true",
			"xpack.security.http.ssl.certificate=escf-node.pem",
			"xpack.security.http.ssl.key=escf-node-key.pem",
			"xpack.security.http.ssl.certificate_authorities=escf-ca.pem",
			"xpack.security.http.ssl.client_authentication=optional",
			"xpack.security.transport.ssl.enabled=true",
			"xpack.security.transport.ssl.certificate=escf-node.pem",
			"xpack.security.transport.ssl.key=escf-node-key.pem",
			"xpack.security.transport.ssl.certificate_authorities=escf-ca.pem",
			"xpack.security.transport.ssl.verification_mode=certificate",
			// The PKI realm (client certificates) and API keys need more
			// than the basic license.
			"xpack.license.self_generated.type=trial",
			"xpack.security.authc.api_key.enabled=true",
			"xpack.security.authc.realms.file.file1.order=0",
			"xpack.security.authc.realms.pki.pki1.order=1",
			// Users made through the API (PutUser): configuring realms
			// leaves out the default ones.
			"xpack.security.authc.realms.native.native1.order=2",
		}
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(conf, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return settings, nil
}

// The roles, as docs/SECURITY.md gives them, on every index.
func (cr *credentials) openSearchSecurityFiles() map[string][]byte {
	var users strings.Builder
	users.WriteString("_meta: {type: \"internalusers\", config_version: 2}\n")
	for _, u := range securityUsers {
		fmt.Fprintf(&users, "%s: {hash: %q, reserved: false, description: \"es-changefeed tests\"}\n", u, cr.hashes[u])
	}
	return map[string][]byte{
		"internal_users.yml": []byte(users.String()),
		"config.yml": []byte(`_meta: {type: "config", config_version: 2}
config:
  dynamic:
    http:
      anonymous_auth_enabled: false
    authc:
      clientcert_auth_domain:
        http_enabled: true
        transport_enabled: false
        order: 0
        http_authenticator: {type: clientcert, config: {username_attribute: cn}, challenge: false}
        authentication_backend: {type: noop}
      basic_internal_auth_domain:
        http_enabled: true
        transport_enabled: true
        order: 1
        http_authenticator: {type: basic, challenge: true}
        authentication_backend: {type: internal}
`),
		"roles.yml":         rolesYAML("opensearch"),
		"roles_mapping.yml": openSearchRolesMapping(),
	}
}

// openSearchRolesMapping maps the admin to all_access and each role of the
// table to its users.
func openSearchRolesMapping() []byte {
	var b strings.Builder
	b.WriteString("_meta: {type: \"rolesmapping\", config_version: 2}\n")
	fmt.Fprintf(&b, "all_access: {reserved: false, users: [%q]}\n", UserAdmin)
	for _, ru := range roleUsers("opensearch") {
		users, _ := json.Marshal(strings.Split(ru[1], ","))
		fmt.Fprintf(&b, "%s: {users: %s}\n", ru[0], users)
	}
	return []byte(b.String())
}

func (cr *credentials) elasticsearchFiles() map[string][]byte {
	var users strings.Builder
	for _, u := range securityUsers {
		fmt.Fprintf(&users, "%s:%s\n", u, cr.hashes[u])
	}
	var usersRoles strings.Builder
	usersRoles.WriteString("superuser:" + UserAdmin + "\n")
	for _, ru := range roleUsers("elasticsearch") {
		fmt.Fprintf(&usersRoles, "%s:%s\n", ru[0], ru[1])
	}
	return map[string][]byte{
		"users":       []byte(users.String()),
		"users_roles": []byte(usersRoles.String()),
		"roles.yml":   rolesYAML("elasticsearch"),
		// The PKI realm's users: the client certificate's DN.
		"role_mapping.yml": []byte("escf_relay:\n  - \"CN=" + clientCN + "\"\n"),
	}
}

// securityPluginClasses are loaded as classpath plugins (the launcher's
// -Descf.plugins) on a secured node.
var securityPluginClasses = map[string][]string{
	"opensearch": {"org.opensearch.security.OpenSearchSecurityPlugin"},
	// SecurityAnalysisPlugin (the launcher's src/es-security): the
	// .security index's analyzers, without which API keys fail.
	"elasticsearch": {"org.elasticsearch.xpack.core.XPackPlugin", "org.elasticsearch.xpack.security.Security", "escf.engines.SecurityAnalysisPlugin"},
}

// do sends req as the admin when the cluster is secured.
func (c *Cluster) do(req *http.Request) (*http.Response, error) {
	if c.creds != nil {
		req.SetBasicAuth(UserAdmin, c.creds.passwords[UserAdmin])
	}
	return c.http.Do(req)
}

// Secured reports whether the cluster runs with security (Config.Security).
func (c *Cluster) Secured() bool { return c.creds != nil }

// SecurityDir is Config.Security: where ca.pem, the password files and the
// client certificate are.
func (c *Cluster) SecurityDir() string { return c.cfg.Security }

// Password returns user's password ("" when the cluster is not secured).
func (c *Cluster) Password(user string) string {
	if c.creds == nil {
		return ""
	}
	return c.creds.passwords[user]
}

// HTTPClient returns a client that trusts the cluster's CA (a plain one
// when not secured); it sends no credentials.
func (c *Cluster) HTTPClient() *http.Client {
	if c.creds == nil {
		return &http.Client{Timeout: 30 * time.Second}
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: c.creds.tlsConfig()}}
}

// afterSecureStart runs once the secured cluster is green: on
// Elasticsearch it creates the relay's API key (FileAPIKey).
func (c *Cluster) afterSecureStart(ctx context.Context) error {
	if c.engine.Product != "elasticsearch" {
		return nil
	}
	k, err := c.CreateAPIKey(ctx, "escf-relay", RoleNamed("elasticsearch", "escf_relay"))
	if err != nil {
		return fmt.Errorf("create the relay's API key: %w", err)
	}
	return os.WriteFile(filepath.Join(c.cfg.Security, FileAPIKey), []byte(k.Encoded+"\n"), 0o600)
}

// APIKey is an Elasticsearch API key as POST /_security/api_key answers.
type APIKey struct {
	ID      string `json:"id"`
	Encoded string `json:"encoded"`
}

// CreateAPIKey makes an API key called name with role's privileges, as the
// admin (Elasticsearch only).
func (c *Cluster) CreateAPIKey(ctx context.Context, name string, role Role) (APIKey, error) {
	return c.CreateAPIKeyExpiring(ctx, name, role, "")
}

// CreateAPIKeyExpiring is CreateAPIKey with an expiration ("1s", "1d";
// "" for none).
func (c *Cluster) CreateAPIKeyExpiring(ctx context.Context, name string, role Role, expiration string) (APIKey, error) {
	exp := ""
	if expiration != "" {
		exp = fmt.Sprintf(`,"expiration":%q`, expiration)
	}
	body := fmt.Sprintf(`{"name":%q,"role_descriptors":{%q:%s}%s}`, name, role.Name, role.Body("elasticsearch"), exp)
	b, err := c.adminCall(ctx, http.MethodPost, "/_security/api_key", []byte(body))
	var k APIKey
	if err == nil && (json.Unmarshal(b, &k) != nil || k.Encoded == "") {
		err = fmt.Errorf("no encoded key in %s", b)
	}
	return k, err
}
