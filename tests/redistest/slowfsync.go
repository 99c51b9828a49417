package redistest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// slowFsyncSource is an LD_PRELOAD shim that sleeps before every fsync and
// fdatasync for ESCF_FSYNC_DELAY_MS milliseconds (default 500). Under
// appendfsync everysec Redis then finds its background fsync still running
// most of the time; it postpones writing the AOF (up to 2 s) while it keeps
// replying to clients, so a SIGKILL loses commits it acknowledged: what a
// power failure does, on every run.
const slowFsyncSource = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static void escf_pause(void) {
	const char *s = getenv("ESCF_FSYNC_DELAY_MS");
	long ms = s ? atol(s) : 500;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

int fsync(int fd) {
	static int (*real)(int);
	if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	escf_pause();
	return real(fd);
}

int fdatasync(int fd) {
	static int (*real)(int);
	if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
	escf_pause();
	return real(fd);
}
`

var (
	shimOnce sync.Once
	shimPath string
	shimErr  string
)

// slowFsyncShim builds the shim once per test process (with cc) and
// returns its path. A missing compiler fails the test with the command
// that installs one.
func slowFsyncShim(tb testing.TB) string {
	tb.Helper()
	shimOnce.Do(func() {
		cc, err := exec.LookPath("cc")
		if err != nil {
			shimErr = "no C compiler (cc) on PATH for the slow-fsync shim: install one with `apt-get install -y gcc libc6-dev` (make test does this)"
			return
		}
		dir, err := os.MkdirTemp("", "escf-slowfsync-")
		if err != nil {
			shimErr = err.Error()
			return
		}
		src := filepath.Join(dir, "slowfsync.c")
		if err := os.WriteFile(src, []byte(slowFsyncSource), 0o644); err != nil {
			shimErr = err.Error()
			return
		}
		out := filepath.Join(dir, "slowfsync.so")
		if b, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", out, src, "-ldl").CombinedOutput(); err != nil {
			shimErr = "build the slow-fsync shim: " + err.Error() + "\n" + string(b)
			return
		}
		shimPath = out
	})
	if shimErr != "" {
		tb.Fatal(shimErr)
	}
	return shimPath
}

// slowFsyncEnv is the environment of a redis-server whose fsyncs take
// delay each.
func slowFsyncEnv(tb testing.TB, delay time.Duration) []string {
	tb.Helper()
	return append(os.Environ(), "LD_PRELOAD="+slowFsyncShim(tb), "ESCF_FSYNC_DELAY_MS="+strconv.FormatInt(delay.Milliseconds(), 10))
}
