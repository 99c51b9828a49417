// Package pgtest starts real PostgreSQL servers for tests (Debian's
// postgresql package: initdb, then postgres on a free loopback port, trust
// authentication), each in a data directory of its own, stopped when the
// test ends. A missing PostgreSQL fails the test with the command that
// installs it; nothing here is a mock.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Install is the command that installs what Start needs.
const Install = "apt-get install -y postgresql"

// Options tweak a server.
type Options struct {
	// Args are extra postgres settings, as "-c", "name=value" pairs.
	Args []string
}

// Server is a running postgres.
type Server struct {
	// Addr is 127.0.0.1:<port>; Dir the data directory (its socket is
	// there too).
	Addr string
	Port int
	Dir  string

	tb   testing.TB
	bin  string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	log  *os.File
}

// binDir finds the server's programs: $ESCF_PG_BIN, or the newest
// /usr/lib/postgresql/<version>/bin.
func binDir() (string, error) {
	if d := os.Getenv("ESCF_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(dirs) == 0 {
		return "", fmt.Errorf("no /usr/lib/postgresql/*/bin/postgres")
	}
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(dirs[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(dirs[j]))))
		return vi > vj
	})
	return filepath.Dir(dirs[0]), nil
}

// asOwner runs a server program: as the postgres user when the test runs
// as root (the server refuses to run as root), as the test's user
// otherwise. The program is this process's own child (not runuser's):
// Stop's Wait then reaps the killed postmaster, whose pid would otherwise
// linger as a zombie of pid 1 and make the next start refuse with "lock
// file postmaster.pid already exists".
func asOwner(prog string, args ...string) *exec.Cmd {
	cmd := exec.Command(prog, args...)
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err == nil {
			uid, _ := strconv.ParseUint(u.Uid, 10, 32)
			gid, _ := strconv.ParseUint(u.Gid, 10, 32)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
			cmd.Env = append(os.Environ(), "HOME="+u.HomeDir, "USER=postgres", "LOGNAME=postgres")
		}
	}
	return cmd
}

// Start runs initdb and postgres on a free 127.0.0.1 port and waits until
// it answers a query. The server is killed and its directory removed in
// tb.Cleanup.
func Start(tb testing.TB, opts ...Options) *Server {
	tb.Helper()
	bin, err := binDir()
	if err != nil {
		tb.Fatalf("PostgreSQL not found (%v): install it with `%s` (make test does this)", err, Install)
	}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("running as root, PostgreSQL must run as the postgres user, which is missing (%v): install it with `%s`", err, Install)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	initdb := asOwner(filepath.Join(bin, "initdb"), "-D", dir, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale", "C")
	if out, err := initdb.CombinedOutput(); err != nil {
		tb.Fatalf("initdb: %v\n%s", err, out)
	}
	s := &Server{tb: tb, Dir: dir, bin: bin}
	s.Port = freePort(tb)
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
	s.args = append([]string{"-D", dir, "-p", strconv.Itoa(s.Port), "-k", dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "max_connections=200", "-c", "shared_buffers=64MB"}, o.Args...)
	s.log, err = os.CreateTemp("", "pgtest-log-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.log.Close(); os.Remove(s.log.Name()) })
	s.start()
	tb.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := asOwner(filepath.Join(s.bin, "postgres"), s.args...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("start postgres: %v", err)
	}
	s.cmd = cmd
	if err := s.waitReady(30 * time.Second); err != nil {
		s.tb.Fatalf("postgres on %s did not answer within 30s: %v\n%s", s.Addr, err, s.Log())
	}
}

func (s *Server) waitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var c *pgx.Conn
		c, err = pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			err = c.Ping(ctx)
			c.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// URL is the libpq URL of database db as the superuser postgres (trust
// authentication, no TLS).
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", s.Addr, db)
}

// CreateDB creates a database and returns its URL.
func (s *Server) CreateDB(tb testing.TB, name string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("create database %s: %v", name, err)
	}
	return s.URL(name)
}

// Pool returns a pool on database db, closed in tb.Cleanup.
func (s *Server) Pool(tb testing.TB, db string) *pgxpool.Pool {
	tb.Helper()
	p, err := pgxpool.New(context.Background(), s.URL(db))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}

// Stop kills the server's processes (SIGKILL, as a crash or a power
// failure would; committed transactions survive in its WAL). Idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
	// The postmaster's children lead process groups of their own: kill
	// them too (they are the processes working in the data directory),
	// and wait until they are gone, so the next start finds the data
	// directory and its shared memory free.
	// A killed process is gone once /proc no longer lists it (a zombie
	// still counts: postgres takes its pid for a live postmaster).
	deadline := time.Now().Add(10 * time.Second)
	seen := map[int]bool{}
	for time.Now().Before(deadline) {
		for _, pid := range procsIn(s.Dir) {
			seen[pid] = true
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		alive := 0
		for pid := range seen {
			if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
				alive++
			}
		}
		if alive == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// procsIn lists the processes whose working directory is dir.
func procsIn(dir string) []int {
	want, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == want {
			out = append(out, pid)
		}
	}
	return out
}

// Restart kills the server and starts it again on the same port and data
// directory (it recovers from its WAL).
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	s.start()
}

// StartAgain starts a stopped server again on the same port and data.
func (s *Server) StartAgain() {
	s.tb.Helper()
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		s.tb.Fatalf("postgres on %s is still running: Stop it first", s.Addr)
	}
	s.start()
}

// Log returns what the server logged so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.log.Name())
	return string(b)
}

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
