package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// walkthroughSection is the README's section whose shell blocks
// TestReadme_Walkthrough runs.
const walkthroughSection = "## Try it on a real engine"

// walkthroughPorts are the ports the walkthrough names: the node, Redis,
// the relay's and the consumer's status pages. The test runs it on free
// ports instead, so that it never collides with what else runs here.
var walkthroughPorts = []string{"9200", "6379", "9464", "9465"}

// readmeShellBlocks returns the ```sh blocks of the README's section
// that starts with the heading title (up to the next "## " heading).
func readmeShellBlocks(tb testing.TB, readme, title string) []string {
	tb.Helper()
	_, rest, ok := strings.Cut(readme, "\n"+title+"\n")
	if !ok {
		tb.Fatalf("README.md has no section %q", title)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)\n```sh\n(.*?)\n```\n").FindAllStringSubmatch(rest, -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) == 0 {
		tb.Fatalf("README.md's section %q has no ```sh block", title)
	}
	return blocks
}

// TestReadme_Walkthrough runs the shell blocks of the README's "Try it on a
// real engine", in order, as one bash script from the repository's root —
// the commands as a reader pastes them, with only their ports changed to
// free ones — and then checks what they built from state: the mirror index
// holds exactly the source index's documents (the delete included), the
// stream holds the delete, the relay's status page answers, and status
// said the feed is healthy. It fails when a command of the walkthrough
// stops working, and stops everything the walkthrough started.
func TestReadme_Walkthrough(t *testing.T) {
	if testEngineName() != "" || os.Getenv("ESCF_TEST_ES_URL") != "" {
		t.Skip("runs once, in the emulator pass of make test: the walkthrough starts its own OpenSearch node")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The last block stops what the others started: it runs once the
	// checks are done (the test creates the file stopFile names), and
	// then nothing the walkthrough started may be left.
	blocks := readmeShellBlocks(t, string(readme), walkthroughSection)
	stopBlock := blocks[len(blocks)-1]
	if len(blocks) < 2 || !strings.HasPrefix(stopBlock, "kill %") {
		t.Fatalf("the walkthrough's last block is not the one that stops it (kill %%…):\n%s", stopBlock)
	}
	stopFile := filepath.Join(t.TempDir(), "stop")
	script := strings.Join(blocks[:len(blocks)-1], "\n") +
		"\necho walkthrough-ready\nwhile [ ! -e " + stopFile + " ]; do sleep 0.2; done\n" + stopBlock + "\n"
	ports := map[string]string{}
	for _, p := range walkthroughPorts {
		if !regexp.MustCompile(`\b` + p + `\b`).MatchString(script) {
			t.Fatalf("the walkthrough no longer names port %s: update walkthroughPorts (the test moves each to a free port)", p)
		}
		_, free, _ := strings.Cut(closedPort(t), ":")
		ports[p] = free
		script = regexp.MustCompile(`\b`+p+`\b`).ReplaceAllString(script, free)
	}
	esURL, redisAddr, statusPage := "http://127.0.0.1:"+ports["9200"], "127.0.0.1:"+ports["6379"], "http://127.0.0.1:"+ports["9464"]+"/"

	// The output goes to a file, not a pipe: the blocks leave servers
	// running in the background, and they would hold a pipe open (Wait
	// would never return).
	logPath := filepath.Join(t.TempDir(), "walkthrough.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	out := fileText(logPath)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { stopGroup(t, pgid, esURL) })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for ready := false; !ready; {
		select {
		case err = <-done:
			t.Fatalf("the walkthrough ended (%v) after %s before its last block:\n%s", err, time.Since(start).Round(time.Second), out.String())
		case <-time.After(5 * time.Minute):
			t.Fatalf("the walkthrough did not finish in 5 min:\n%s", out.String())
		case <-time.After(200 * time.Millisecond):
			ready = strings.Contains(out.String(), "walkthrough-ready\n")
		}
	}
	t.Logf("the walkthrough's blocks ran in %s", time.Since(start).Round(time.Second))

	if !strings.Contains(out.String(), "feed orders: healthy") {
		t.Errorf("status did not report the feed healthy:\n%s", out.String())
	}
	// The mirror equals the index: ids and sources (2, 3 and 4; 1 deleted).
	docs := func(index string) (map[string]string, error) {
		st, b, err := tryDo("GET", esURL+"/"+index+"/_search?size=100", "")
		if err != nil || st != 200 {
			return nil, fmt.Errorf("GET %s/_search: %d %v %s", index, st, err, b)
		}
		var r struct {
			Hits struct {
				Hits []struct {
					ID     string          `json:"_id"`
					Source json.RawMessage `json:"_source"`
				} `json:"hits"`
			} `json:"hits"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, err
		}
		m := map[string]string{}
		for _, h := range r.Hits.Hits {
			m[h.ID] = compact(h.Source)
		}
		return m, nil
	}
	var src, mirror map[string]string
	deadline := time.Now().Add(60 * time.Second)
	for {
		mustDo(t, "POST", esURL+"/orders,mirror-orders/_refresh", "")
		if src, err = docs("orders"); err != nil {
			t.Fatal(err)
		}
		mirror, err = docs("mirror-orders")
		if err == nil && fmt.Sprint(mirror) == fmt.Sprint(src) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60s after the walkthrough the mirror holds %v (%v), the index %v\n%s", mirror, err, src, out.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if ids := sortedKeys(src); fmt.Sprint(ids) != "[2 3 4]" {
		t.Fatalf("the index holds %v after the walkthrough, want 2, 3 and 4 (1 deleted)", ids)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	var deleted []string
	events := streamEvents(t, rdb, redisx.NewKeys("orders").Events())
	for _, e := range events {
		if e.Op == redisx.OpDelete {
			deleted = append(deleted, e.ID)
		}
	}
	if fmt.Sprint(deleted) != "[1]" {
		t.Fatalf("the stream's deletes: %v, want the delete of 1; the stream: %+v\n%s", deleted, events, out.String())
	}
	st, page, err := tryDo("GET", statusPage, "")
	if err != nil || st != 200 || !strings.Contains(string(page), "orders") {
		t.Fatalf("the relay's status page %s: %d %v, mentions the feed: %v", statusPage, st, err, strings.Contains(string(page), "orders"))
	}

	// The last block stops everything: the script ends, and no process of
	// its group is left (a launcher under go run outlived kill %1).
	if err := os.WriteFile(stopFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-done:
		if err != nil {
			t.Fatalf("the walkthrough's last block failed (%v):\n%s", err, out.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the walkthrough's last block did not end in 1 min:\n%s", out.String())
	}
	for end := time.Now().Add(30 * time.Second); syscall.Kill(-pgid, 0) == nil; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(end) {
			ps, _ := exec.Command("ps", "-eo", "pgid=,pid=,args=").Output()
			var left []string
			for _, l := range strings.Split(string(ps), "\n") {
				if f := strings.Fields(l); len(f) > 2 && f[0] == fmt.Sprint(pgid) {
					left = append(left, strings.Join(f[1:], " "))
				}
			}
			t.Fatalf("30s after the last block, processes the walkthrough started still run:\n%s", strings.Join(left, "\n"))
		}
	}
}

// fileText reads a file on each String call (for a log still written).
type fileText string

func (f fileText) String() string {
	b, err := os.ReadFile(string(f))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return string(b)
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// stopGroup stops what the walkthrough left running in the process group
// pgid (SIGTERM, as kill %1 … does; SIGKILL after 30s) and checks that the
// node at esURL is gone.
func stopGroup(tb testing.TB, pgid int, esURL string) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(-pgid, 0) == nil {
		if time.Now().After(deadline) {
			tb.Errorf("the walkthrough's processes outlived SIGTERM by 30s: killing them")
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	client := http.Client{Timeout: time.Second}
	for end := time.Now().Add(30 * time.Second); ; {
		resp, err := client.Get(esURL)
		if err != nil && errors.Is(err, syscall.ECONNREFUSED) {
			return
		}
		if err == nil {
			resp.Body.Close()
		}
		if time.Now().After(end) {
			tb.Errorf("the walkthrough's node at %s still answers 30s after its launcher was stopped", esURL)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
