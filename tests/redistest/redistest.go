// Package redistest starts real redis-server processes for tests, each on a
// free loopback port, stopped when the test ends.
package redistest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a running redis-server.
type Server struct {
	Addr string
	Dir  string
	Port int

	// TLS holds the certificate files of a server StartTLS started (nil
	// for a plain one).
	TLS *TLSFiles

	tb        testing.TB
	args      []string
	env       []string
	cmd       *exec.Cmd
	tlsConfig *tls.Config
}

// Options tweak a server.
type Options struct {
	// Args are extra redis-server arguments, e.g. "--appendonly", "yes".
	Args []string
	// SlowFsync, when above 0, makes every fsync of the server take that
	// long (an LD_PRELOAD shim, built with cc): with --appendfsync
	// everysec, a SIGKILL (Stop) then loses commits Redis acknowledged, as
	// a power failure does, on every run.
	SlowFsync time.Duration
	// Dir, when set, is the directory the server starts on (its files
	// loaded per Args, e.g. a copy of a killed server's append-only file,
	// CopyFiles) instead of a new empty one.
	Dir string
}

// Start runs redis-server on a free 127.0.0.1 port and waits for PING. The
// server is killed in tb.Cleanup. A missing redis-server fails the test with
// the command that installs it.
func Start(tb testing.TB, opts ...Options) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server not found on PATH: install it with `apt-get install -y redis-server` (make test does this)")
	}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s := &Server{tb: tb, Dir: o.Dir}
	if s.Dir == "" {
		s.Dir = tb.TempDir()
	}
	s.Port = freePort(tb)
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
	s.args = append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.Port), "--dir", s.Dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "yes", "--daemonize", "no",
		"--logfile", filepath.Join(s.Dir, "redis.log")}, o.Args...)
	if o.SlowFsync > 0 {
		s.env = slowFsyncEnv(tb, o.SlowFsync)
	}
	s.start(bin)
	tb.Cleanup(s.Stop)
	return s
}

func (s *Server) start(bin string) {
	s.tb.Helper()
	s.cmd = exec.Command(bin, s.args...)
	s.cmd.Env = s.env // nil: the test's own
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.tb.Fatalf("start redis-server: %v", err)
	}
	if err := s.waitPing(10 * time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
		s.tb.Fatalf("redis-server on %s did not answer PING: %v\n%s", s.Addr, err, log)
	}
}

func (s *Server) waitPing(d time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, TLSConfig: s.tlsConfig})
	defer c.Close()
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// URL is redis://127.0.0.1:<port>/0 (rediss:// for StartTLS).
func (s *Server) URL() string {
	if s.tlsConfig != nil {
		return fmt.Sprintf("rediss://%s/0", s.Addr)
	}
	return fmt.Sprintf("redis://%s/0", s.Addr)
}

// Client returns a new client to the server, closed in tb.Cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(s.options())
	tb.Cleanup(func() { c.Close() })
	return c
}

// Stop kills the server (idempotent).
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart kills the server and starts it again on the same port and dir
// (with persistence options, data survives per those options).
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	bin, _ := exec.LookPath("redis-server")
	s.start(bin)
}

// StartAgain starts a server that was stopped (Stop) again on the same
// port, dir and arguments, e.g. after the test changed its files on disk.
func (s *Server) StartAgain() {
	s.tb.Helper()
	if s.cmd != nil {
		s.tb.Fatalf("redis-server on %s is still running: Stop it first", s.Addr)
	}
	bin, _ := exec.LookPath("redis-server")
	s.start(bin)
}

// CopyFiles copies the files of a stopped server (Stop) to a new
// directory and returns it: what the server holds after it starts again,
// to be read by another server (Options.Dir) while this one runs.
func (s *Server) CopyFiles(tb testing.TB) string {
	tb.Helper()
	if s.cmd != nil {
		tb.Fatalf("redis-server on %s is running: Stop it before copying its files", s.Addr)
	}
	dir := tb.TempDir()
	if err := os.CopyFS(dir, os.DirFS(s.Dir)); err != nil {
		tb.Fatalf("copy %s: %v", s.Dir, err)
	}
	return dir
}

// AOFDir is where the server keeps its append-only files with
// --appendonly yes (Redis 7: base and incr files and a manifest).
func (s *Server) AOFDir() string { return filepath.Join(s.Dir, "appendonlydir") }

// Log returns what the server logged so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	return string(b)
}

// Pause stops the server process (SIGSTOP) until Resume.
func (s *Server) Pause() { _ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { _ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT) }

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
