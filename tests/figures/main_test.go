package main

import (
	"strings"
	"testing"
)

func TestTable_SumsRunsPerTest(t *testing.T) {
	in := `{"scenario":"kill","test":"TestA","faults":20,"entries":100,"docs":10,"lost":0,"duplicated":0,"wrong":0,"note":"first"}
{"scenario":"kill","test":"TestA","faults":20,"entries":50,"docs":5,"lost":1,"duplicated":0,"wrong":2,"note":"a|b"}
{"scenario":"pause","test":"TestB","faults":3,"entries":7,"docs":1,"lost":0,"duplicated":0,"wrong":0}
`
	var out strings.Builder
	if err := table(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want header, rule and 2 rows:\n%s", len(lines), out.String())
	}
	if got, want := lines[2], "| kill | `TestA` | 2 | 40 | 150 | 1 | 0 | 2 | a\\|b |"; got != want {
		t.Errorf("row A = %q, want %q", got, want)
	}
	if got, want := lines[3], "| pause | `TestB` | 1 | 3 | 7 | 0 | 0 | 0 |  |"; got != want {
		t.Errorf("row B = %q, want %q", got, want)
	}
}

func TestTable_BadInput(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"empty", "", "no figures"},
		{"not JSON", "FIGURE x\n", "line 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := table(strings.NewReader(tt.in), &strings.Builder{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}
