package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/es-changefeed/es-changefeed/tests/engines"
)

// The compat mode writes docs/COMPATIBILITY.md from what `make
// test-engines` left in a directory: per engine, the `go test -json`
// output of the real-engine suite (<engine>.json) and its figure lines
// (<engine>.figures.jsonl). The table is what ran, not what was meant to.

// writeCompat writes the document for the pinned engines to out.
func writeCompat(dir, out string) error {
	var b strings.Builder
	if err := compat(dir, engines.Names(), &b); err != nil {
		return err
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

// engineRun is one engine's results.
type engineRun struct {
	name    string
	version string // from the suite's own "backend:" line
	started time.Time
	elapsed time.Duration
	tests   map[string]*testResult // by full test name
	figures []figure
	costs   []costFigure // the "COST {json}" lines of the suite's log
}

// costFigure is what the cost tests log (tests/e2e/cost_test.go).
type costFigure struct {
	Engine string  `json:"engine"`
	What   string  `json:"what"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Note   string  `json:"note"`
}

type testResult struct {
	secured bool // it ran on a secured node (its log says "backend: … secured by …")
	name    string
	action  string // pass, fail, skip
	elapsed float64
	reason  string // the skip message, or the first failure line
	output  []string
}

// testEvent is a line of `go test -json`.
type testEvent struct {
	Time    time.Time `json:"Time"`
	Action  string    `json:"Action"`
	Package string    `json:"Package"`
	Test    string    `json:"Test"`
	Elapsed float64   `json:"Elapsed"`
	Output  string    `json:"Output"`
}

// readRun parses an engine's go test -json stream.
func readRun(name string, r io.Reader) (*engineRun, error) {
	run := &engineRun{name: name, tests: map[string]*testResult{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4<<20), 4<<20)
	var first, last time.Time
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue // go test's own non-JSON lines (build errors)
		}
		var ev testEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		if first.IsZero() {
			first = ev.Time
		}
		last = ev.Time
		if ev.Test == "" {
			continue
		}
		key := shortPackage(ev.Package) + "." + ev.Test
		tr := run.tests[key]
		if tr == nil {
			tr = &testResult{name: key}
			run.tests[key] = tr
		}
		switch ev.Action {
		case "output":
			out := strings.TrimRight(ev.Output, "\n")
			tr.output = append(tr.output, out)
			tr.secured = tr.secured || strings.Contains(out, "backend: ") && strings.Contains(out, " secured by ")
			if i := strings.Index(out, "backend: "); i >= 0 && run.version == "" {
				run.version = versionIn(out[i:]) // "" until a line names it
			}
			if i := strings.Index(out, "COST {"); i >= 0 {
				var cf costFigure
				if err := json.Unmarshal([]byte(out[i+len("COST "):]), &cf); err == nil {
					run.costs = append(run.costs, cf)
				}
			}
		case "pass", "fail", "skip":
			tr.action, tr.elapsed = ev.Action, ev.Elapsed
			tr.reason = reasonOf(tr)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	run.started, run.elapsed = first, last.Sub(first)
	return run, nil
}

func shortPackage(p string) string {
	if i := strings.Index(p, "/tests/"); i >= 0 {
		return p[i+len("/tests/"):]
	}
	return p
}

// versionIn finds "(opensearch 2.19.6)" or "opensearch-2 (OpenSearch
// 2.19.6)" in a backend line.
func versionIn(s string) string {
	if i := strings.Index(s, "("); i >= 0 {
		if j := strings.Index(s[i:], ")"); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return ""
}

// reasonOf is the message of t.Skip, or the first line a failing test
// printed with its file:line prefix.
func reasonOf(tr *testResult) string {
	var msgs []string
	for _, o := range tr.output {
		o = strings.TrimSpace(o)
		if strings.HasPrefix(o, "===") || strings.HasPrefix(o, "---") || o == "" {
			continue
		}
		if _, msg, ok := strings.Cut(o, ".go:"); ok {
			if _, m, ok := strings.Cut(msg, ": "); ok {
				msgs = append(msgs, m)
				continue
			}
		}
	}
	if len(msgs) == 0 {
		return ""
	}
	if tr.action == "skip" {
		return msgs[len(msgs)-1]
	}
	for _, m := range msgs {
		if !strings.HasPrefix(m, "backend:") && !strings.HasPrefix(m, "FIGURE") && !strings.Contains(m, "level=") {
			return m
		}
	}
	return msgs[0]
}

func readFigures(path string) ([]figure, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []figure
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var fg figure
		if err := json.Unmarshal(sc.Bytes(), &fg); err != nil {
			return nil, fmt.Errorf("%s line %d: %v", path, n, err)
		}
		out = append(out, fg)
	}
	return out, sc.Err()
}

// compat reads dir and writes the document to w. engines gives the order
// (the pinned engines); an engine without results is listed as not run.
func compat(dir string, engines []string, w io.Writer) error {
	var runs []*engineRun
	for _, name := range engines {
		f, err := os.Open(filepath.Join(dir, name+".json"))
		if os.IsNotExist(err) {
			runs = append(runs, &engineRun{name: name})
			continue
		}
		if err != nil {
			return err
		}
		run, err := readRun(name, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s.json: %w", name, err)
		}
		if run.figures, err = readFigures(filepath.Join(dir, name+".figures.jsonl")); err != nil {
			return err
		}
		runs = append(runs, run)
	}

	fmt.Fprint(w, compatHead)
	var when time.Time
	for _, r := range runs {
		if !r.started.IsZero() && (when.IsZero() || r.started.Before(when)) {
			when = r.started
		}
	}
	if !when.IsZero() {
		fmt.Fprintf(w, "Last generated %s.\n\n", when.UTC().Format("2006-01-02 15:04 UTC"))
	}

	fmt.Fprintln(w, "## Summary")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| engine | version | tests passed | failed | skipped | on a secured node | suite time |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range runs {
		if r.tests == nil {
			fmt.Fprintf(w, "| %s | – | not run | | | | |\n", r.name)
			continue
		}
		p, f, s := r.counts()
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %s | %s |\n", r.name, r.version, p, f, s, r.securedRuns(), r.elapsed.Round(time.Second))
	}
	fmt.Fprintln(w)

	// The matrix: every top-level test that ran (not skipped) on at least
	// one engine; tests skipped on all of them are listed with the reason.
	names := map[string]bool{}
	for _, r := range runs {
		for n := range r.tests {
			if !strings.Contains(n[strings.Index(n, ".")+1:], "/") {
				names[n] = true
			}
		}
	}
	var ran, skipped []string
	for n := range names {
		anyRan := false
		for _, r := range runs {
			if tr := r.tests[n]; tr != nil && tr.action != "skip" {
				anyRan = true
			}
		}
		if anyRan {
			ran = append(ran, n)
		} else {
			skipped = append(skipped, n)
		}
	}
	sort.Strings(ran)
	sort.Strings(skipped)

	fmt.Fprintln(w, "## What ran on each engine")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "pass / FAIL / skip (with the reason below the table) per test; subtests in brackets; – not run on that engine")
	fmt.Fprintln(w, "(on the four engines after opensearch-2, CI leaves out the node harness's own tests and the tests whose")
	fmt.Fprintln(w, "faults are on the Redis or consumer side: see .ci/run).")
	fmt.Fprintln(w)
	fmt.Fprint(w, "| test |")
	for _, r := range runs {
		fmt.Fprintf(w, " %s |", r.name)
	}
	fmt.Fprint(w, "\n|---|")
	for range runs {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	type skipNote struct{ test, engine, reason string }
	var notes []skipNote
	for _, n := range ran {
		fmt.Fprintf(w, "| `%s` |", n)
		for _, r := range runs {
			tr := r.tests[n]
			switch {
			case tr == nil:
				fmt.Fprint(w, " – |")
			case tr.action == "skip":
				notes = append(notes, skipNote{n, r.name, tr.reason})
				fmt.Fprintf(w, " skip [%d] |", len(notes))
			default:
				fmt.Fprintf(w, " %s%s |", word(tr.action), r.subtests(n))
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	for i, sn := range notes {
		fmt.Fprintf(w, "%d. `%s` on %s: %s\n", i+1, sn.test, sn.engine, escape(sn.reason))
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
	}

	fmt.Fprintln(w, "## Figures")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "What the audits counted on each engine (documents in the cluster at the end, stream entries checked, and")
	fmt.Fprintln(w, "the goal of 0 lost, 0 duplicated, 0 wrong events).")
	fmt.Fprintln(w)
	haveFigures := false
	for _, r := range runs {
		if len(r.figures) == 0 {
			continue
		}
		haveFigures = true
		fmt.Fprintf(w, "### %s\n\n", r.name)
		fmt.Fprintln(w, "| scenario | test | faults | documents | entries | lost | duplicated | wrong | note |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
		for _, fg := range r.figures {
			fmt.Fprintf(w, "| %s | `%s` | %d | %d | %d | %d | %d | %d | %s |\n", fg.Scenario, fg.Test, fg.Faults, fg.Docs,
				fg.Entries, fg.Lost, fg.Duplicated, fg.Wrong, escape(fg.Note))
		}
		fmt.Fprintln(w)
	}
	if !haveFigures {
		fmt.Fprintln(w, "No figures were recorded.")
		fmt.Fprintln(w)
	}

	fmt.Fprintln(w, "## What the relay costs the cluster")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Measured by `TestRealCost_RefreshesAndIdleRequests` (tests/e2e/cost_test.go) on each engine's node.")
	fmt.Fprintln(w)
	haveCosts := false
	for _, r := range runs {
		if len(r.costs) == 0 {
			continue
		}
		haveCosts = true
		fmt.Fprintf(w, "### %s\n\n", r.name)
		fmt.Fprintln(w, "| what | value | note |")
		fmt.Fprintln(w, "|---|---|---|")
		for _, cf := range r.costs {
			fmt.Fprintf(w, "| %s | %.4g %s | %s |\n", escape(cf.What), cf.Value, cf.Unit, escape(cf.Note))
		}
		fmt.Fprintln(w)
	}
	if !haveCosts {
		fmt.Fprintln(w, "Not measured in this run.")
		fmt.Fprintln(w)
	}

	fmt.Fprintln(w, "## Emulator-only tests")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Skipped on every engine: they need what only internal/esemu can do (held writes, injected HTTP faults and")
	fmt.Fprintln(w, "failing shard copies, op histories, request counts, TLS and users). They run on the emulator in `make test`.")
	fmt.Fprintln(w)
	reasons := map[string][]string{}
	var order []string
	for _, n := range skipped {
		reason := ""
		for _, r := range runs {
			if tr := r.tests[n]; tr != nil && tr.reason != "" {
				reason = tr.reason
				break
			}
		}
		if _, ok := reasons[reason]; !ok {
			order = append(order, reason)
		}
		reasons[reason] = append(reasons[reason], "`"+n+"`")
	}
	for _, reason := range order {
		fmt.Fprintf(w, "- %s: %s\n", strings.Join(reasons[reason], ", "), escape(reason))
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, compatTail)
	return nil
}

func (r *engineRun) counts() (pass, fail, skip int) {
	for _, tr := range r.tests {
		switch tr.action {
		case "pass":
			pass++
		case "fail":
			fail++
		case "skip":
			skip++
		}
	}
	return
}

// securedRuns says how the top-level tests that ran on a secured node did:
// "3 passed", "2 passed, 1 FAILED", "none".
func (r *engineRun) securedRuns() string {
	var pass, fail int
	for n, tr := range r.tests {
		if !tr.secured || strings.Contains(n[strings.Index(n, ".")+1:], "/") {
			continue
		}
		switch tr.action {
		case "pass":
			pass++
		case "fail":
			fail++
		}
	}
	switch {
	case pass+fail == 0:
		return "none"
	case fail == 0:
		return fmt.Sprintf("%d passed", pass)
	}
	return fmt.Sprintf("%d passed, %d FAILED", pass, fail)
}

// subtests sums a test's subtests as " (3 pass, 1 skip)".
func (r *engineRun) subtests(name string) string {
	c := map[string]int{}
	for n, tr := range r.tests {
		if strings.HasPrefix(n, name+"/") {
			c[tr.action]++
		}
	}
	if len(c) == 0 {
		return ""
	}
	var parts []string
	for _, a := range []string{"pass", "fail", "skip"} {
		if c[a] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c[a], word(a)))
		}
	}
	return " [" + strings.Join(parts, ", ") + "]"
}

func word(action string) string {
	if action == "fail" {
		return "FAIL"
	}
	return action
}

func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ")
}

const compatHead = `# Compatibility with real Elasticsearch and OpenSearch

Which Elasticsearch and OpenSearch versions the feed is tested on, and what passed on each.

This file is written by ` + "`make test-engines`" + ` (tests/figures, compat mode) from what the real-engine
suite did: ` + "`tests/engines`" + ` starts real nodes from Maven Central's jars (one JVM per node, on
127.0.0.1), and ` + "`ESCF_TEST_ENGINE=<engine> go test ./tests/engines/ ./tests/e2e/`" + ` runs every test that
can run on a real cluster against them. Do not edit it by hand; change the tests, or the text in
tests/figures/compat.go. The engines and their versions are pinned in internal/engine/versions.txt.

`

const compatTail = `## What the embedded engines cannot do, and why

These are limits of running the engines from Maven Central's jars, not of the feed:

- **Elasticsearch 8.x and 9.x: ` + "`GET /`" + `.** The root endpoint lives in the ` + "`rest-root`" + ` module, which Elastic
  does not publish to Maven Central (nor ` + "`data-streams`" + `, ` + "`reindex`" + `, ` + "`x-pack-fleet`" + `).
  The launcher serves ` + "`GET /`" + ` from the node's own build and cluster state so that clients can read the
  version; it is the only answer of these nodes that is not the engine's own, and its golden response is
  not compared.
- **Elasticsearch data streams.** On 8.x and 9.x a data stream is created by a composable template and the
  first write, resolved by ` + "`_resolve/index`" + ` and rolled over, all in the server; ` + "`GET`" + `/` + "`DELETE /_data_stream`" + `
  (the module) answer 405, so tests delete the backing indices' data stream by deleting the cluster. On 7.17
  the template's ` + "`data_stream`" + ` field itself is unknown without the x-pack data-streams plugin: data stream
  tests skip there.
- **Security (TLS, users, API keys).** OpenSearch's security plugin (2.19.4.0, 3.4.0.0) and Elasticsearch's
  x-pack security (8.x, 9.x) run from Maven Central's jars: ` + "`tests/engines`" + ` starts a node secured
  (` + "`--security DIR`" + `, tests/engines/README.md). ` + "`TestCluster_Secured`" + `, ` + "`TestCLI_SecuredRealEngine`" + ` (the relay, ` + "`resync`" + `,
  ` + "`status`" + `, ` + "`consume --bootstrap`" + ` and the bulk sink as users with docs/SECURITY.md's roles, and the refusals) and
  ` + "`TestSecurity_LeastPrivileges`" + ` (each role whole and with each grant removed; its tables are in docs/SECURITY.md)
  run there: the summary's "on a secured node" column counts them. Elasticsearch 7.17 has no security jar on
  Central: there the node runs plain behind a TLS proxy (haproxy, from Debian), which tests the client only (TLS,
  the CA, passwords, the client certificate): roles are not enforced and there are no API keys, so those
  subtests and the least-privilege test skip.
- **` + "`_fleet/global_checkpoints`" + `** (x-pack) is not there either.
`

// summary prints, from a go test -json stream, each package's counts and
// the output of every failed test, and reports whether anything failed:
// what a person reading CI's log needs, without every passing test's log.
func summary(r io.Reader, out io.Writer, prefix string) (failed bool, err error) {
	w := &prefixWriter{w: out, prefix: prefix}
	type pkgCount struct{ pass, fail, skip int }
	counts := map[string]*pkgCount{}
	var pkgs []string
	outputs := map[string][]string{}
	var failures []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4<<20), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			fmt.Fprintln(w, string(line)) // build errors and the like
			continue
		}
		var ev testEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return true, err
		}
		pc := counts[ev.Package]
		if pc == nil {
			pc = &pkgCount{}
			counts[ev.Package] = pc
			pkgs = append(pkgs, ev.Package)
		}
		key := ev.Package + " " + ev.Test
		switch ev.Action {
		case "output":
			outputs[key] = append(outputs[key], strings.TrimRight(ev.Output, "\n"))
		case "pass", "fail", "skip":
			if ev.Test == "" {
				if ev.Action == "fail" {
					failed = true
					failures = append(failures, key)
				}
				continue
			}
			if strings.Contains(ev.Test, "/") {
				continue
			}
			switch ev.Action {
			case "pass":
				pc.pass++
			case "skip":
				pc.skip++
			case "fail":
				pc.fail++
				failed = true
				failures = append(failures, key)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	for _, k := range failures {
		fmt.Fprintf(w, "--- FAIL %s\n", k)
		out := outputs[k]
		if len(out) > 200 {
			out = append([]string{fmt.Sprintf("… (%d lines before)", len(out)-200)}, out[len(out)-200:]...)
		}
		for _, o := range out {
			fmt.Fprintln(w, "    "+o)
		}
	}
	for _, p := range pkgs {
		c := counts[p]
		fmt.Fprintf(w, "%s: %d passed, %d failed, %d skipped\n", shortPackage(p), c.pass, c.fail, c.skip)
	}
	return failed, nil
}

// prefixWriter starts every line with prefix (the engine, when several
// run at once).
type prefixWriter struct {
	w      io.Writer
	prefix string
	mid    bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	var buf []byte
	for _, c := range b {
		if !p.mid && p.prefix != "" {
			buf = append(buf, p.prefix...)
		}
		buf = append(buf, c)
		p.mid = c != '\n'
	}
	if _, err := p.w.Write(buf); err != nil {
		return 0, err
	}
	return len(b), nil
}
