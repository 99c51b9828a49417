package e2e

import (
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/tests/esemu"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// runBinary runs the binary to completion and returns its exit code and
// output.
func runBinary(tb testing.TB, timeout time.Duration, args ...string) (int, string) {
	tb.Helper()
	cmd := exec.Command(binary(tb), args...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String()
		}
		if err != nil {
			tb.Fatal(err)
		}
		return 0, out.String()
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		tb.Fatalf("%v did not exit within %s:\n%s", args, timeout, out.String())
		return 0, ""
	}
}

func closedPort(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestCLI_BadInput: every bad input gets one clear error line naming the
// thing, and a non-zero exit (2 for usage, 1 for failures).
func TestCLI_BadInput(t *testing.T) {
	c := cluster(t, esemu.Config{})
	createIndex(t, c, "present", 1, 0)
	secured := cluster(t, esemu.Config{Users: map[string]string{"elastic": "right"}})
	srv := redistest.Start(t)
	deadRedis := "redis://" + closedPort(t) + "/0"
	deadES := "http://" + closedPort(t)
	tests := []struct {
		name     string
		args     []string
		code     int
		contains []string
	}{
		{"unreachable ES", []string{"run", "--es", deadES, "--redis", srv.URL(), "--index", "present"}, 1,
			[]string{"cannot reach Elasticsearch", deadES, "check --es"}},
		{"wrong password", []string{"run", "--es", secured.URL(), "--es-user", "elastic", "--es-password", "wrong", "--redis", srv.URL(), "--index", "present"}, 1,
			[]string{`refused user "elastic"`, "401", "--es-user/--es-password"}},
		{"no credentials", []string{"run", "--es", secured.URL(), "--redis", srv.URL(), "--index", "present"}, 1,
			[]string{"refused no credentials", "401"}},
		{"unknown index", []string{"run", "--es", c.URL(), "--redis", srv.URL(), "--index", "present,absent"}, 1,
			[]string{`--index "absent" names no index, alias or data stream`, "no such index [absent]", "check for a typo"}},
		{"alias with a typo", []string{"run", "--es", c.URL(), "--redis", srv.URL(), "--index", "presnt-alias"}, 1,
			[]string{`--index "presnt-alias" names no index, alias or data stream`, "check for a typo"}},
		{"unreachable Redis", []string{"run", "--es", c.URL(), "--redis", deadRedis, "--index", "present"}, 1,
			[]string{"cannot reach Redis at " + deadRedis}},
		{"malformed Redis URL", []string{"run", "--es", c.URL(), "--redis", "localhost:6379", "--index", "present"}, 2,
			[]string{"--redis", "bad Redis URL", "localhost:6379"}},
		{"Redis URL password is masked", []string{"run", "--es", c.URL(), "--redis", "ftp://u:hunter2@host", "--index", "present"}, 2,
			[]string{"--redis", "scheme \"ftp\""}},
		{"malformed ES URL", []string{"run", "--es", "ftp://nowhere", "--redis", srv.URL(), "--index", "present"}, 2,
			[]string{"--es", "bad Elasticsearch URL", "ftp://nowhere"}},
		{"ES URL without host", []string{"run", "--es", "http://", "--redis", srv.URL(), "--index", "present"}, 2,
			[]string{"--es", "no host"}},
		{"no index", []string{"run", "--es", c.URL(), "--redis", srv.URL()}, 2,
			[]string{"no index to follow", "--index"}},
		{"bad --from", []string{"run", "--es", c.URL(), "--redis", srv.URL(), "--index", "present", "--from", "yesterday"}, 2,
			[]string{`--from "yesterday"`, "beginning or now"}},
		{"bad feed name", []string{"run", "--es", c.URL(), "--redis", srv.URL(), "--index", "present", "--feed", "a{b}"}, 2,
			[]string{`feed name "a{b}"`}},
		{"bad batch size", []string{"run", "--es", c.URL(), "--redis", srv.URL(), "--index", "present", "--batch-size", "0"}, 2,
			[]string{"--batch-size 0"}},
		{"bad --max-delete-fraction", []string{"run", "--es", c.URL(), "--redis", srv.URL(), "--index", "present", "--deletes", "--max-delete-fraction", "1.5"}, 2,
			[]string{"--max-delete-fraction 1.5"}},
		{"bad --delete-listing", []string{"run", "--es", c.URL(), "--redis", srv.URL(), "--index", "present", "--deletes", "--delete-listing", "magic"}, 2,
			[]string{`--delete-listing "magic"`, "auto, pit or scroll"}},
		{"unknown flag", []string{"run", "--nope"}, 2, []string{"flag provided but not defined", "nope"}},
		{"bad log level", []string{"run", "--index", "present", "--log-level", "loud"}, 2, []string{`--log-level "loud"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := runBinary(t, 30*time.Second, tt.args...)
			if code != tt.code {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tt.code, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "es-changefeed: ") {
				t.Errorf("last line is not the error line: %q", last)
			}
			for _, want := range tt.contains {
				if !strings.Contains(last, want) {
					t.Errorf("error line %q does not contain %q", last, want)
				}
			}
			if strings.Contains(out, "hunter2") {
				t.Errorf("output leaks a password:\n%s", out)
			}
		})
	}
}
