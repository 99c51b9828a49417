package redistest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// AOFHeldBack reports whether the server holds acknowledged writes back
// from its append-only file: two readings of INFO persistence, apart by
// 20 ms, each with a background fsync running (aof_pending_bio_fsync) and
// unwritten data (aof_buffer_length), not less the second time. Data that
// is only waiting for the end of the event loop's iteration is gone by the
// second reading; data held back behind a slow fsync (appendfsync everysec
// postpones the write up to 2 s) is still there, and a SIGKILL now loses
// it, and what was written between the readings. extra runs in the
// pipeline of each reading (second false, then true): a test's own reads of
// the state being cut, e.g. to know that a write of its own came between.
func AOFHeldBack(ctx context.Context, rdb redis.UniversalClient, extra func(p redis.Pipeliner, second bool)) (bool, error) {
	read := func(second bool) (pending, buffer int64, err error) {
		var info *redis.StringCmd
		_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			if extra != nil {
				extra(p, second)
			}
			info = p.Info(ctx, "persistence")
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
		return infoField(info.Val(), "aof_pending_bio_fsync"), infoField(info.Val(), "aof_buffer_length"), nil
	}
	p1, b1, err := read(false)
	if err != nil || p1 == 0 || b1 == 0 {
		return false, err
	}
	time.Sleep(20 * time.Millisecond)
	p2, b2, err := read(true)
	return err == nil && p2 > 0 && b2 >= b1, err
}

// infoField is an integer field of an INFO reply (0 when absent).
func infoField(info, field string) int64 {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
