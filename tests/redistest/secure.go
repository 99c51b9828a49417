package redistest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// CA is a throwaway certificate authority for tests.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
}

// NewCA makes a CA valid for a day.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: serial(tb), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Issue signs a certificate for 127.0.0.1 and localhost, usable by servers
// and clients, and returns it and its key in PEM.
func (ca *CA) Issue(tb testing.TB, cn string) (certPEM, keyPEM []byte) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: serial(tb), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func serial(tb testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// TLSFiles are the PEM files of a TLS server and of a client its CA
// signed.
type TLSFiles struct {
	CA         string // the CA certificate (trust this)
	ClientCert string // a client certificate the server accepts
	ClientKey  string
	ServerCert string
	ServerKey  string
}

// TLSOptions configure StartTLS.
type TLSOptions struct {
	// AuthClients is tls-auth-clients: "yes" (a client certificate is
	// required), "optional" or "no". Default "yes".
	AuthClients string
	// Args are extra redis-server arguments.
	Args []string
}

// StartTLS runs redis-server with TLS only (--port 0, --tls-port on a free
// port), its certificate signed by a fresh CA; the files are in s.TLS.
// s.URL() is rediss://127.0.0.1:<port>/0 and s.Client trusts the CA and
// presents the client certificate.
func StartTLS(tb testing.TB, o TLSOptions) *Server {
	tb.Helper()
	if o.AuthClients == "" {
		o.AuthClients = "yes"
	}
	dir := tb.TempDir()
	ca := NewCA(tb, "escf-test-redis-ca")
	sc, sk := ca.Issue(tb, "redis-server")
	cc, ck := ca.Issue(tb, "escf-client")
	f := &TLSFiles{CA: filepath.Join(dir, "ca.crt"), ServerCert: filepath.Join(dir, "server.crt"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key")}
	for path, b := range map[string][]byte{f.CA: ca.CertPEM, f.ServerCert: sc, f.ServerKey: sk, f.ClientCert: cc, f.ClientKey: ck} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	pair, err := tls.X509KeyPair(cc, ck)
	if err != nil {
		tb.Fatal(err)
	}
	tlsCfg := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	port := freePort(tb)
	args := append([]string{"--port", "0", "--tls-port", strconv.Itoa(port), "--tls-cert-file", f.ServerCert, "--tls-key-file", f.ServerKey,
		"--tls-ca-cert-file", f.CA, "--tls-auth-clients", o.AuthClients}, o.Args...)
	return startWith(tb, port, args, tlsCfg, f)
}

// startWith is Start with a chosen port (the TLS port when tlsCfg is set).
func startWith(tb testing.TB, port int, extra []string, tlsCfg *tls.Config, files *TLSFiles) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server not found on PATH: install it with `apt-get install -y redis-server` (make test does this)")
	}
	s := &Server{tb: tb, Dir: tb.TempDir(), Port: port, tlsConfig: tlsCfg, TLS: files}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
	base := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.Port)}
	if tlsCfg != nil {
		base = []string{"--bind", "127.0.0.1"} // the ports come with extra
	}
	s.args = append(append(base, "--dir", s.Dir, "--save", "", "--appendonly", "no", "--protected-mode", "yes", "--daemonize", "no",
		"--logfile", filepath.Join(s.Dir, "redis.log")), extra...)
	s.start(bin)
	tb.Cleanup(s.Stop)
	return s
}

// options are the go-redis options of an admin connection (the default
// user) to the server.
func (s *Server) options() *redis.Options {
	return &redis.Options{Addr: s.Addr, TLSConfig: s.tlsConfig}
}

// ACL runs ACL <args…> as the default user, e.g.
// s.ACL(tb, "SETUSER", "relay", "on", ">pw", "~escf:{f}:*", "+@all").
func (s *Server) ACL(tb testing.TB, args ...string) any {
	tb.Helper()
	c := redis.NewClient(s.options())
	defer c.Close()
	cmd := append([]any{"ACL"}, toAny(args)...)
	v, err := c.Do(context.Background(), cmd...).Result()
	if err != nil {
		tb.Fatalf("ACL %s: %v", strings.Join(args, " "), err)
	}
	return v
}

// SetUser creates or resets an ACL user with a password and the rules
// (ACL SETUSER name reset on >password rules…).
func (s *Server) SetUser(tb testing.TB, name, password string, rules ...string) {
	tb.Helper()
	s.ACL(tb, append([]string{"SETUSER", name, "reset", "on", ">" + password}, rules...)...)
}

// ACLLog returns the server's ACL LOG entries (denials), newest first.
func (s *Server) ACLLog(tb testing.TB) []map[string]any {
	tb.Helper()
	c := redis.NewClient(s.options())
	defer c.Close()
	entries, err := c.ACLLog(context.Background(), 100).Result()
	if err != nil {
		tb.Fatalf("ACL LOG: %v", err)
	}
	var out []map[string]any
	for _, e := range entries {
		out = append(out, map[string]any{"reason": e.Reason, "context": e.Context, "object": e.Object, "username": e.Username})
	}
	return out
}

// UserURL is the server's URL with user:password.
func (s *Server) UserURL(user, password string) string {
	scheme := "redis"
	if s.tlsConfig != nil {
		scheme = "rediss"
	}
	return fmt.Sprintf("%s://%s:%s@%s/0", scheme, user, password, s.Addr)
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Sentinels is a master, a replica and sentinels watching them.
type Sentinels struct {
	Master, Replica *Server
	// Addrs are the sentinels' host:port.
	Addrs []string
	// Name is the master's name in the sentinels ("escf-master").
	Name string

	procs []*exec.Cmd
	dirs  []string
}

// StartSentinels runs a master, a replica of it and n sentinels (quorum
// n/2+1) on free loopback ports, with down-after-milliseconds 2000 and a
// failover timeout of 4s (a sentinel pings every second: a shorter
// down-after makes a busy test machine fail over by itself), and waits until the replica is in sync and every
// sentinel knows it. Everything stops in tb.Cleanup.
func StartSentinels(tb testing.TB, n int) *Sentinels {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server not found on PATH: install it with `apt-get install -y redis-server` (make test does this)")
	}
	st := &Sentinels{Name: "escf-master"}
	// No diskless-sync delay: the replica has the data within milliseconds
	// (the default waits 5s before the first full sync).
	st.Master = Start(tb, Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
	st.Replica = Start(tb, Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(st.Master.Port)}})
	rc := st.Replica.Client(tb)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(rc.Info(context.Background(), "replication").Val(), "master_link_status:up"); {
		if time.Now().After(deadline) {
			tb.Fatalf("the replica %s did not sync with the master within 10s:\n%s", st.Replica.Addr, st.Replica.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := 0; i < n; i++ {
		dir := tb.TempDir()
		port := freePort(tb)
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n"+
			"sentinel monitor %s 127.0.0.1 %d %d\n"+
			"sentinel down-after-milliseconds %s 2000\n"+
			"sentinel failover-timeout %s 4000\n"+
			"sentinel parallel-syncs %s 1\n",
			port, dir, filepath.Join(dir, "sentinel.log"), st.Name, st.Master.Port, n/2+1, st.Name, st.Name, st.Name)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			tb.Fatal(err)
		}
		cmd := exec.Command(bin, conf, "--sentinel")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			tb.Fatalf("start redis-server --sentinel: %v", err)
		}
		st.procs = append(st.procs, cmd)
		st.dirs = append(st.dirs, dir)
		st.Addrs = append(st.Addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	tb.Cleanup(st.stop)
	// Wait until each sentinel answers and sees the replica.
	deadline := time.Now().Add(15 * time.Second)
	for _, addr := range st.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			reps, err := sc.Replicas(ctx, st.Name).Result()
			cancel()
			if err == nil && len(reps) > 0 {
				break
			}
			if time.Now().After(deadline) {
				sc.Close()
				tb.Fatalf("sentinel %s does not see the replica within 15s (%v):\n%s", addr, err, st.Log())
			}
			time.Sleep(50 * time.Millisecond)
		}
		sc.Close()
	}
	return st
}

// URL is redis-sentinel://<sentinels>/<master>/0.
func (st *Sentinels) URL() string {
	return "redis-sentinel://" + strings.Join(st.Addrs, ",") + "/" + st.Name + "/0"
}

// MasterAddr asks the first sentinel for the current master.
func (st *Sentinels) MasterAddr(tb testing.TB) string {
	tb.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: st.Addrs[0]})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(context.Background(), st.Name).Result()
	if err != nil {
		tb.Fatalf("SENTINEL GET-MASTER-ADDR-BY-NAME: %v", err)
	}
	return net.JoinHostPort(a[0], a[1])
}

// WaitReplicated waits until the replica has everything the master wrote
// so far (its replication offset reached the master's), so that killing
// the master loses nothing.
func (st *Sentinels) WaitReplicated(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	offset := func(c *redis.Client, field string) int64 {
		for _, line := range strings.Split(c.Info(ctx, "replication").Val(), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return -1
	}
	want := offset(st.Master.Client(tb), "master_repl_offset")
	deadline := time.Now().Add(10 * time.Second)
	for offset(st.Replica.Client(tb), "slave_repl_offset") < want {
		if time.Now().After(deadline) {
			tb.Fatalf("the replica did not reach the master's replication offset %d within 10s:\n%s", want, st.Replica.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Log is what the sentinels logged.
func (st *Sentinels) Log() string {
	var b strings.Builder
	for i, d := range st.dirs {
		l, _ := os.ReadFile(filepath.Join(d, "sentinel.log"))
		fmt.Fprintf(&b, "--- sentinel %s\n%s", st.Addrs[i], l)
	}
	return b.String()
}

func (st *Sentinels) stop() {
	for _, c := range st.procs {
		if c.Process != nil {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			_ = c.Wait()
		}
	}
}
