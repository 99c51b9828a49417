package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/engines"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// privilegeFigure is one line of the least-privilege proof: a role of
// docs/SECURITY.md with one grant removed (Removed "" for the whole
// role), run as a user with exactly that, and what happened. The test
// logs it as "PRIVILEGE {json}"; `go run ./tests/figures privileges`
// writes docs/SECURITY.md's tables from those lines.
type privilegeFigure struct {
	Engine  string `json:"engine"`
	Role    string `json:"role"`
	Removed string `json:"removed"`
	// Result: "works" (the whole role), "needed" (the run failed or was
	// refused, naming it), "not used" (the run did not need it: Only says
	// when it is), "not provable here" (Only says why).
	Result string `json:"result"`
	Line   string `json:"line"` // the refusal, as the program said it
	Only   string `json:"only,omitempty"`
}

// workload runs a program as user (password in pwFile) against the
// secured cluster; ok says the program did its work; out is what it
// printed.
type workload func(t *testing.T, n int, user, pwFile string) (ok bool, out string)

// TestSecurity_LeastPrivileges proves docs/SECURITY.md's roles on a real
// secured node: for the relay (run --deletes), consume --bootstrap, the
// bulk sink and status --es, a user with exactly the role does the work,
// and with each single grant removed the program is refused, saying so
// with a line that names the missing privilege (Elasticsearch: the
// privileges that grant the action; OpenSearch: the action). A grant
// whose removal changes nothing fails the test, unless the table says
// when it is used (engines.Grant.Only).
func TestSecurity_LeastPrivileges(t *testing.T) {
	if name := testEngineName(); name != "" && engines.SecurityKindOf(name) != engines.EngineSecurity {
		t.Skipf("%s is secured by a %s: no roles to prove", name, engines.SecurityKindOf(name))
	}
	if testing.Short() {
		t.Skip("-short: about 25 program runs per engine")
	}
	c, dir := securedEngine(t)
	ctx := context.Background()
	product := c.Engine().Product
	sec := func(name string) string { return filepath.Join(dir, name) }
	want := secureIndex(t, c)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	es := []string{"--es", c.URL(), "--es-ca-cert", sec(engines.FileCA)}
	// The feed the consumers read, relayed as escf-relay.
	ref := startBinary(t, append([]string{"run", "--redis", srv.URL(), "--feed", "ref", "--index", "secure",
		"--poll-interval", "20ms", "--es-user", engines.UserRelay, "--es-password-file", sec(engines.PasswordFile(engines.UserRelay))}, es...)...)
	waitMirrored(t, ref, srv, "ref", want)
	// status reads a feed of its own: the bulk runs leave dead letters in
	// ref's, and status exits 1 on an unhealthy feed.
	st := startBinary(t, append([]string{"run", "--redis", srv.URL(), "--feed", "st", "--index", "secure",
		"--poll-interval", "20ms", "--es-user", engines.UserRelay, "--es-password-file", sec(engines.PasswordFile(engines.UserRelay))}, es...)...)
	waitMirrored(t, st, srv, "st", want)

	const user = "escf-less"
	password := "Lp-" + strings.ToUpper(fmt.Sprintf("%x", time.Now().UnixNano())) + "-q7z!"
	pwFile := writeFile(t, "less.password", []byte(password+"\n"))

	workloads := map[string]workload{
		"escf_relay": func(t *testing.T, n int, user, pwFile string) (bool, string) {
			feedName := fmt.Sprintf("lp-relay-%d", n)
			stream := redisx.NewKeys(feedName).Events()
			return runUntil(t, 20*time.Second, time.Second, func() bool {
				return rdb.XLen(ctx, stream).Val() >= int64(len(want))
			}, append([]string{"run", "--redis", srv.URL(), "--feed", feedName, "--index", "secure",
				"--poll-interval", "20ms", "--deletes", "--delete-scan-interval", "50ms",
				"--es-user", user, "--es-password-file", pwFile}, es...)...)
		},
		"escf_bootstrap": func(t *testing.T, n int, user, pwFile string) (bool, string) {
			code, out := runBinary(t, 60*time.Second, append([]string{"consume", "--redis", srv.URL(), "--feed", "ref",
				"--group", fmt.Sprintf("lp-boot-%d", n), "--sink", "stdout", "--bootstrap", "--bootstrap-only",
				"--es-user", user, "--es-password-file", pwFile}, es...)...)
			ok := code == 0
			for id := range want {
				ok = ok && strings.Contains(out, `"`+id+`"`)
			}
			return ok, out
		},
		"escf_bulk": func(t *testing.T, n int, user, pwFile string) (bool, string) {
			target := fmt.Sprintf("copy-lp%d-secure", n)
			// Each run starts without the positions index: creating it is
			// one of the grants.
			if code := adminStatus(t, c, "DELETE", "/escf-applied"); code != 200 && code != 404 {
				t.Fatalf("DELETE /escf-applied: HTTP %d", code)
			}
			return runUntil(t, 20*time.Second, time.Second, func() bool {
				adminDo(t, c, "POST", "/_refresh", "")
				b := adminDo(t, c, "GET", "/_cat/indices/copy-lp*?h=index,docs.count", "")
				return strings.Contains(string(b), fmt.Sprintf("%s %d", target, len(want)))
			}, "consume", "--redis", srv.URL(), "--feed", "ref", "--group", fmt.Sprintf("lp-bulk-%d", n), "--sink", "bulk",
				"--bulk-es", c.URL(), "--bulk-ca-cert", sec(engines.FileCA), "--bulk-user", user, "--bulk-password-file", pwFile,
				"--bulk-index", fmt.Sprintf("copy-lp%d-{index}", n), "--shutdown-timeout", "1s")
		},
		"escf_status": func(t *testing.T, n int, user, pwFile string) (bool, string) {
			code, out := runBinary(t, 30*time.Second, append([]string{"status", "--redis", srv.URL(), "--feed", "st",
				"--es-user", user, "--es-password-file", pwFile}, es...)...)
			return code == 0, out
		},
	}
	n := 0
	for _, role := range engines.Roles(product) {
		work := workloads[role.Name]
		if work == nil {
			t.Fatalf("no workload for %s: every role of the table is proven", role.Name)
		}
		t.Run(role.Name, func(t *testing.T) {
			for i := -1; i < len(role.Grants); i++ {
				less := role
				removed := ""
				var g engines.Grant
				if i >= 0 {
					less, g, removed = role.Without(i), role.Grants[i], role.Grants[i].String()
				}
				less.Name = "escf_less"
				if err := c.PutRole(ctx, less); err != nil {
					t.Fatal(err)
				}
				if err := c.PutUser(ctx, user, password, less.Name); err != nil {
					t.Fatal(err)
				}
				n++
				ok, out := work(t, n, user, pwFile)
				line := refusal(out)
				f := privilegeFigure{Engine: c.Engine().Name, Role: role.Name, Removed: removed, Line: line, Only: g.Only}
				switch {
				case i < 0 && (!ok || line != ""):
					t.Errorf("%s with its whole role did not work (docs/SECURITY.md's role is not enough):\n%s", role.Name, tail(out, 20))
				case i < 0:
					f.Result = "works"
				case ok && line == "" && g.Only == "" && product == "elasticsearch" && g.Indices == "" && g.Privilege == "monitor":
					// The program's only call under cluster monitor was GET /,
					// which Elasticsearch grants by cluster:monitor/main; the
					// launcher serves it itself (the rest-root module is not
					// on Maven Central) and checks no privilege.
					f.Result, f.Only = "not provable here", "GET / (cluster:monitor/main) is answered by tests/engines' launcher on Elasticsearch, which checks no privilege (rest-root is not on Maven Central)"
				case ok && line == "" && g.Only == "":
					t.Errorf("%s works without %s: docs/SECURITY.md lists a privilege the program does not need (remove it, or say when it is used in engines.Grant.Only)", role.Name, removed)
					f.Result = "not used"
				case ok && line == "":
					f.Result = "not used"
				case !namesGrant(line, product, g):
					t.Errorf("%s without %s: the refusal does not name the missing privilege (%s):\n%s", role.Name, removed, wantNamed(product, g), tail(out, 20))
					f.Result = "needed"
				default:
					f.Result = "needed"
				}
				b, _ := json.Marshal(f)
				t.Logf("PRIVILEGE %s", b)
			}
		})
	}
}

// runUntil starts the binary and waits until done says its work is done
// (then lets it run settle longer, to make the calls it makes after), it
// exits, it prints a refusal (a program that retries would go on doing
// so), or timeout; ok is done and still running.
func runUntil(t *testing.T, timeout, settle time.Duration, done func() bool, args ...string) (ok bool, out string) {
	t.Helper()
	cmd := binaryCommand(t, nil, args...)
	var buf syncBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	deadline := time.After(timeout)
	for {
		select {
		case <-exited:
			return false, buf.String()
		case <-deadline:
			return false, buf.String()
		case <-time.After(100 * time.Millisecond):
		}
		if refusal(buf.String()) != "" {
			return false, buf.String()
		}
		if done() {
			select {
			case <-exited:
				return false, buf.String()
			case <-time.After(settle):
			}
			select {
			case <-exited:
				return false, buf.String()
			default:
				return true, buf.String()
			}
		}
	}
}

// refusal is the first line of out that reports a 403 (or a refused
// authorization), "" when there is none. Not a bare "403": log lines'
// timestamps have milliseconds (a CI run took "…T08:01:55.403Z … bootstrap:
// done" for a refusal).
func refusal(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "HTTP 403") || strings.Contains(l, "security_exception") || strings.Contains(l, "is unauthorized") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

var grantedBy = regexp.MustCompile(`privileges \[([^\]]*)\]`)

// namesGrant says whether a refusal names g: on Elasticsearch the 403
// lists the privileges that grant the action ("granted by the index
// privileges [read,all]"); on OpenSearch it names the action.
func namesGrant(line, product string, g engines.Grant) bool {
	if product == "opensearch" {
		return strings.Contains(line, g.Action)
	}
	for _, m := range grantedBy.FindAllStringSubmatch(line, -1) {
		if slices.Contains(strings.Split(m[1], ","), g.Privilege) {
			return true
		}
	}
	return false
}

func wantNamed(product string, g engines.Grant) string {
	if product == "opensearch" {
		return "want the action " + g.Action
	}
	return "want " + g.Privilege + " among the privileges the refusal says grant the action"
}

// TestRefusal: the least-privilege test's reading of a program's output
// finds refusals, and not a timestamp's milliseconds.
func TestRefusal(t *testing.T) {
	for out, want := range map[string]string{
		`time=2026-12-05T08:01:55.403Z level=INFO msg="bootstrap: done" documents=5`:                  "",
		"ok\nes-changefeed: denied user \"x\" (GET /: HTTP 403 security_exception: no permissions)\n": `es-changefeed: denied user "x" (GET /: HTTP 403 security_exception: no permissions)`,
		`level=WARN error="action [indices:data/read/search] is unauthorized for user [x]"`:           `level=WARN error="action [indices:data/read/search] is unauthorized for user [x]"`,
	} {
		if got := refusal(out); got != want {
			t.Errorf("refusal(%q) = %q, want %q", out, got, want)
		}
	}
}
