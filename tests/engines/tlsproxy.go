package engines

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SecurityKind says how a cluster started with Config.Security is secured.
type SecurityKind int

const (
	// NoSecurity: the engine cannot start secured (or the cluster was not).
	NoSecurity SecurityKind = iota
	// EngineSecurity: the engine's own security plugin (HasSecurity):
	// HTTPS and transport TLS, users, and the roles of docs/SECURITY.md,
	// enforced by the engine.
	EngineSecurity
	// TLSProxy: a plain node behind haproxy, which terminates TLS with a
	// certificate of the same CA, asks every request for a user's password
	// or the client certificate (ClientCertUser), and forwards it. It
	// tests the client only: TLS, the CA, basic auth and client
	// certificates against a real TLS stack. Roles are not enforced
	// (every user may do anything), the 401 is haproxy's, not the
	// engine's, and the nodes' transport is plain.
	TLSProxy
)

// String is how messages and the launcher name the kind, e.g. "TLS proxy
// (client only): roles are not enforced".
func (k SecurityKind) String() string {
	switch k {
	case NoSecurity:
		return "not secured"
	case EngineSecurity:
		return "the engine's security plugin"
	case TLSProxy:
		return "TLS proxy (client only): roles are not enforced"
	}
	return fmt.Sprintf("SecurityKind(%d)", int(k))
}

// tlsProxyEngines are the lines with no security plugin on Maven Central
// that start secured behind a TLS proxy: x-pack-security is not published
// for 7.17.
var tlsProxyEngines = map[string]bool{"elasticsearch-7": true}

// SecurityKindOf says how the engine called name starts secured
// (Config.Security): EngineSecurity where HasSecurity, TLSProxy on
// elasticsearch-7, else NoSecurity.
func SecurityKindOf(name string) SecurityKind {
	e, err := Lookup(name)
	switch {
	case err != nil:
		return NoSecurity
	case HasSecurity(e.Name):
		return EngineSecurity
	case tlsProxyEngines[e.Name]:
		return TLSProxy
	}
	return NoSecurity
}

// securedEngines names the lines that start secured, e.g.
// "elasticsearch-7 (TLS proxy)".
func securedEngines() []string {
	var out []string
	for _, n := range Names() {
		switch SecurityKindOf(n) {
		case EngineSecurity:
			out = append(out, n)
		case TLSProxy:
			out = append(out, n+" (TLS proxy)")
		}
	}
	return out
}

// SecurityKind says how the cluster is secured: NoSecurity when started
// without Config.Security.
func (c *Cluster) SecurityKind() SecurityKind {
	if c.creds == nil {
		return NoSecurity
	}
	return SecurityKindOf(c.engine.Name)
}

// ProxyUserHeader is the response header in which the TLS proxy names the
// user it let the request through as: the basic-auth user, or
// ClientCertUser for the client certificate.
const ProxyUserHeader = "X-Escf-Proxy-User"

// haproxyInstall is how to get haproxy (Debian's package).
const haproxyInstall = "apt-get install -y haproxy"

// haproxyPath finds haproxy on PATH or in /usr/sbin (not on a user's PATH
// on Debian).
func haproxyPath() (string, error) {
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err == nil {
		return "/usr/sbin/haproxy", nil
	}
	return "", fmt.Errorf("haproxy not found (on PATH or /usr/sbin): a secured elasticsearch-7 runs behind it; install it with `%s` (make test and make test-engines do)", haproxyInstall)
}

// tlsProxy is one haproxy process in front of a cluster's nodes: port i
// forwards to node i. Its files (haproxy.cfg, haproxy.pem, ca.pem,
// haproxy.pid, haproxy.log) are in dir.
type tlsProxy struct {
	dir    string
	ports  []int // the proxy's port of node i
	cmd    *exec.Cmd
	exited chan struct{}
}

// url is node i's URL through the proxy.
func (p *tlsProxy) url(i int) string {
	return "https://127.0.0.1:" + strconv.Itoa(p.ports[i])
}

// startTLSProxy starts haproxy on 127.0.0.1: ports[i] (TLS, with the
// node certificate of cr) forwards to 127.0.0.1:backends[i] (plain HTTP)
// what authenticates as one of the users or with a client certificate
// of cr's CA. It returns once every port completes a TLS handshake with
// the certificate; when a port is taken the error wraps errPortTaken.
// The process dies with its parent (Pdeathsig); stop ends it.
func startTLSProxy(ctx context.Context, dir string, cr *credentials, ports, backends []int) (*tlsProxy, error) {
	bin, err := haproxyPath()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &tlsProxy{dir: dir, ports: ports}
	files := map[string][]byte{
		"haproxy.pem": append(append(append([]byte{}, cr.nodePEM...), cr.caPEM...), cr.nodeKey...),
		"ca.pem":      cr.caPEM,
		"haproxy.cfg": []byte(haproxyConfig(dir, cr.passwords, ports, backends)),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	logPath := filepath.Join(dir, "haproxy.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "\n=== escf-engines: starting haproxy at %s\n", time.Now().Format(time.RFC3339))
	// -db: in the foreground, one process (no master, no daemon), so that
	// the parent's death (Pdeathsig) and SIGTERM end it.
	cmd := exec.Command(bin, "-db", "-f", filepath.Join(dir, "haproxy.cfg"))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start haproxy: %w", err)
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(p.exited)
	}()
	// haproxy writes a pid file only as a daemon or master: for a person
	// looking for a leftover process.
	_ = os.WriteFile(filepath.Join(dir, "haproxy.pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
	if err := p.waitReady(ctx, cr); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// waitReady waits until every port completes a handshake with the proxy's
// certificate (not another process that holds the port), failing at once
// when haproxy exits.
func (p *tlsProxy) waitReady(ctx context.Context, cr *credentials) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: time.Second}, Config: cr.tlsConfig()}
	for _, port := range p.ports {
		addr := "127.0.0.1:" + strconv.Itoa(port)
		for {
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				conn.Close()
				break
			}
			select {
			case <-p.exited:
				b, _ := os.ReadFile(filepath.Join(p.dir, "haproxy.log"))
				err := fmt.Errorf("haproxy exited (%v); the end of %s:\n%s", p.cmd.ProcessState, filepath.Join(p.dir, "haproxy.log"), tail(string(b), 20))
				if strings.Contains(string(b), "cannot bind socket") {
					err = fmt.Errorf("%w: %w", errPortTaken, err)
				}
				return err
			case <-ctx.Done():
				return fmt.Errorf("haproxy does not answer TLS on %s: %w (last: %v)", addr, ctx.Err(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// stop ends haproxy (SIGTERM: it stops at once; SIGKILL after
// DefaultStopTimeout) and waits for it.
func (p *tlsProxy) stop() {
	if p == nil || p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(DefaultStopTimeout):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
	p.cmd = nil
	_ = os.Remove(filepath.Join(p.dir, "haproxy.pid"))
}

// haproxyConfig is the proxy's configuration: a frontend per node that
// asks for a user's password or a client certificate (optional, verified
// against the CA: an untrusted one ends the handshake) and forwards to
// the node.
func haproxyConfig(dir string, passwords map[string]string, ports, backends []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# es-changefeed tests/engines: a TLS proxy in front of plain nodes
# (%s). Written at each start.
global
    log stdout format raw local0 info
    nbthread 1
    ssl-default-bind-options ssl-min-ver TLSv1.2

defaults
    mode http
    log global
    option httplog
    timeout connect 5s
    timeout client 5m
    timeout server 5m
    timeout http-request 30s

# The users' passwords are in the security directory in the clear anyway;
# a crypt(3) hash would be checked in haproxy's event loop on every request.
userlist escf
`, TLSProxy)
	for _, u := range securityUsers {
		fmt.Fprintf(&b, "    user %s insecure-password %s\n", u, passwords[u])
	}
	for i := range ports {
		fmt.Fprintf(&b, `
frontend n%[1]d
    bind 127.0.0.1:%[2]d ssl crt %[3]s ca-file %[4]s verify optional
    acl cert_used ssl_c_used
    acl cert_verified ssl_c_verify 0
    acl cert_user ssl_c_s_dn(CN) -m str %[5]s
    acl password_ok http_auth(escf)
    http-request set-var(txn.escf_user) str(%[5]s) if cert_used cert_verified cert_user
    http-request set-var(txn.escf_user) http_auth_user if !{ var(txn.escf_user) -m found } password_ok
    http-request auth realm es-changefeed unless { var(txn.escf_user) -m found }
    http-response set-header %[6]s %%[var(txn.escf_user)]
    default_backend n%[1]d

backend n%[1]d
    server n%[1]d 127.0.0.1:%[7]d
`, i, ports[i], filepath.Join(dir, "haproxy.pem"), filepath.Join(dir, "ca.pem"), ClientCertUser, ProxyUserHeader, backends[i])
	}
	return b.String()
}

// startTLSProxy starts the cluster's proxy in front of its nodes: on
// Config.HTTPPort+i when given (the ports a user asked for are the
// proxy's; the nodes take free ones), else on free ports.
func (c *Cluster) startTLSProxy(ctx context.Context) error {
	ports := make([]int, len(c.nodes))
	backends := make([]int, len(c.nodes))
	for i, n := range c.nodes {
		backends[i] = n.httpPort
		if c.cfg.HTTPPort > 0 {
			ports[i] = c.cfg.HTTPPort + i
			continue
		}
		var err error
		if ports[i], err = freePort(); err != nil {
			return err
		}
	}
	p, err := startTLSProxy(ctx, filepath.Join(c.dir, "tls-proxy"), c.creds, ports, backends)
	if err != nil {
		return fmt.Errorf("the TLS proxy: %w", err)
	}
	c.proxy = p
	return nil
}

// ProxyLog is the TLS proxy's log (haproxy's: one line per request), ""
// when the cluster has no proxy.
func (c *Cluster) ProxyLog() string {
	if c.proxy == nil {
		return ""
	}
	return filepath.Join(c.proxy.dir, "haproxy.log")
}
