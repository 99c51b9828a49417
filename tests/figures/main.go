// Command figures turns the figure lines the reliability suite writes
// (ESCF_FIGURES=file go test ./tests/e2e/) into the Markdown table of
// docs/RELIABILITY.md: one row per scenario, summed over the runs; and,
// in compat mode, what make test-engines left in DIR (per engine the
// suite's go test -json output and its figures) into docs/COMPATIBILITY.md,
// and in privileges mode the least-privilege runs into docs/SECURITY.md.
//
//	go run ./tests/figures FILE
//	go run ./tests/figures compat DIR docs/COMPATIBILITY.md
//	go run ./tests/figures privileges DIR docs/SECURITY.md
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/es-changefeed/es-changefeed/tests/engines"
)

type figure struct {
	Scenario   string `json:"scenario"`
	Test       string `json:"test"`
	Faults     int    `json:"faults"`
	Entries    int    `json:"entries"`
	Docs       int    `json:"docs"`
	Lost       int    `json:"lost"`
	Duplicated int    `json:"duplicated"`
	Wrong      int    `json:"wrong"`
	Note       string `json:"note"`
}

type row struct {
	figure
	runs  int
	notes []string
}

func main() {
	if len(os.Args) == 4 && os.Args[1] == "compat" {
		if err := writeCompat(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintf(os.Stderr, "figures: compat: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) == 4 && os.Args[1] == "privileges" {
		if err := writePrivileges(os.Args[2], engines.Names(), os.Args[3]); err != nil {
			fmt.Fprintf(os.Stderr, "figures: privileges: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if (len(os.Args) == 3 || len(os.Args) == 4) && os.Args[1] == "summary" {
		prefix := ""
		if len(os.Args) == 4 {
			prefix = os.Args[3]
		}
		f, err := os.Open(os.Args[2])
		if err != nil {
			fmt.Fprintf(os.Stderr, "figures: summary: %v\n", err)
			os.Exit(1)
		}
		failed, err := summary(f, os.Stdout, prefix)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "figures: summary: %s: %v\n", os.Args[2], err)
			os.Exit(1)
		}
		if failed {
			os.Exit(1)
		}
		return
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run ./tests/figures FILE (the ESCF_FIGURES file of a test run)")
		fmt.Fprintln(os.Stderr, "       go run ./tests/figures summary FILE [PREFIX] (a go test -json stream: counts, and the failed tests' output)")
		fmt.Fprintln(os.Stderr, "       go run ./tests/figures compat DIR OUT (make test-engines: DIR/<engine>.json → OUT)")
		fmt.Fprintln(os.Stderr, "       go run ./tests/figures privileges DIR DOC (make security-tables: DIR/<engine>.json → DOC's generated block)")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "figures: %v\n", err)
		os.Exit(1)
	}
	defer f.Close()
	if err := table(f, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "figures: %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// table reads figure lines from r and writes the table to w.
func table(r io.Reader, w io.Writer) error {
	var order []string
	rows := map[string]*row{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var fg figure
		if err := json.Unmarshal(sc.Bytes(), &fg); err != nil {
			return fmt.Errorf("line %d: %v", n, err)
		}
		rw, ok := rows[fg.Test]
		if !ok {
			rw = &row{figure: figure{Scenario: fg.Scenario, Test: fg.Test}}
			rows[fg.Test] = rw
			order = append(order, fg.Test)
		}
		rw.runs++
		rw.Faults += fg.Faults
		rw.Entries += fg.Entries
		rw.Docs += fg.Docs
		rw.Lost += fg.Lost
		rw.Duplicated += fg.Duplicated
		rw.Wrong += fg.Wrong
		rw.notes = append(rw.notes, fg.Note)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(order) == 0 {
		return fmt.Errorf("no figures: did the tests run (go test -run TestReliability)?")
	}
	fmt.Fprintln(w, "| scenario | test | runs | faults | entries checked | lost | duplicated | wrong | last run |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, t := range order {
		rw := rows[t]
		fmt.Fprintf(w, "| %s | `%s` | %d | %d | %d | %d | %d | %d | %s |\n", rw.Scenario, rw.Test, rw.runs, rw.Faults,
			rw.Entries, rw.Lost, rw.Duplicated, rw.Wrong, strings.ReplaceAll(rw.notes[len(rw.notes)-1], "|", "\\|"))
	}
	return nil
}
