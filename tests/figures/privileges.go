package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The privileges mode writes docs/SECURITY.md's least-privilege tables
// from what `make security-tables` (or `make test-engines`) left in a
// directory: per engine, a go test -json output (<engine>.json) with
// TestSecurity_LeastPrivileges, whose "PRIVILEGE {json}" lines say, per
// role and removed grant, what the program did. The tables replace what
// is between privilegesBegin and privilegesEnd in the document.

const (
	privilegesBegin = "<!-- privileges:begin: written by make security-tables (tests/figures), do not edit -->"
	privilegesEnd   = "<!-- privileges:end -->"
)

// privilegeFigure is tests/e2e's line.
type privilegeFigure struct {
	Engine  string `json:"engine"`
	Role    string `json:"role"`
	Removed string `json:"removed"`
	Result  string `json:"result"`
	Line    string `json:"line"`
	Only    string `json:"only"`
}

// writePrivileges rewrites the generated block of doc from dir.
func writePrivileges(dir string, engines []string, doc string) error {
	old, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	s := string(old)
	i, j := strings.Index(s, privilegesBegin), strings.Index(s, privilegesEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %q … %q block to write into", doc, privilegesBegin, privilegesEnd)
	}
	var b strings.Builder
	if err := privileges(dir, engines, &b); err != nil {
		return err
	}
	s = s[:i+len(privilegesBegin)] + "\n" + b.String() + s[j:]
	return os.WriteFile(doc, []byte(s), 0o644)
}

// privileges writes one table per engine that has a run in dir.
func privileges(dir string, engines []string, w io.Writer) error {
	found := 0
	for _, name := range engines {
		f, err := os.Open(filepath.Join(dir, name+".json"))
		if os.IsNotExist(err) {
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
		var figs []privilegeFigure
		var top *testResult
		for key, tr := range run.tests {
			if strings.HasSuffix(key, ".TestSecurity_LeastPrivileges") {
				top = tr
			}
		}
		for _, key := range sortedKeys(run.tests) {
			for _, out := range run.tests[key].output {
				if i := strings.Index(out, "PRIVILEGE {"); i >= 0 {
					var pf privilegeFigure
					if err := json.Unmarshal([]byte(out[i+len("PRIVILEGE "):]), &pf); err != nil {
						return fmt.Errorf("%s: %q: %v", name, out, err)
					}
					figs = append(figs, pf)
				}
			}
		}
		if top == nil || len(figs) == 0 {
			continue
		}
		found++
		verdict := "passed"
		if top.action != "pass" {
			verdict = "**" + word(top.action) + "**: " + top.reason
		}
		fmt.Fprintf(w, "\n#### %s (%s)\n\n", name, run.version)
		fmt.Fprintf(w, "TestSecurity_LeastPrivileges %s, %s, %.0f s.\n\n", verdict, run.started.UTC().Format("2006-01-02"), top.elapsed)
		fmt.Fprintln(w, "| role | without | result | what the program said |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for _, pf := range figs {
			removed, said := pf.Removed, refusalExcerpt(pf.Line)
			if removed == "" {
				removed = "(nothing: the whole role)"
			}
			switch {
			case pf.Result == "not used" && pf.Only != "":
				said = "used only by " + pf.Only
			case pf.Result == "not provable here":
				said = pf.Only
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", pf.Role, escape("`"+removed+"`"), pf.Result, escape(said))
		}
	}
	if found == 0 {
		return fmt.Errorf("no TestSecurity_LeastPrivileges run with PRIVILEGE lines in %s (<engine>.json)", dir)
	}
	return nil
}

// refusalExcerpt keeps what a reader needs of the program's line: from
// the status on, the engine's reason, without the log's own fields.
func refusalExcerpt(line string) string {
	if i := strings.Index(line, "HTTP 40"); i >= 0 {
		line = line[i:]
	}
	line = strings.ReplaceAll(line, `\"`, `"`)
	// The program's advice and the log's next fields follow the reason.
	for _, end := range []string{"): ", `" `} {
		if i := strings.Index(line, end); i >= 0 {
			line = line[:i]
		}
	}
	line = strings.TrimRight(line, `")`)
	if len(line) > 240 {
		line = line[:240] + "…"
	}
	return line
}

func sortedKeys(m map[string]*testResult) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
