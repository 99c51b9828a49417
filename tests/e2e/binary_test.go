package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// errorsTB records Errorf calls (the rest is the real test's).
type errorsTB struct {
	testing.TB
	errs []string
}

func (e *errorsTB) Helper() {}

func (e *errorsTB) Errorf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

// TestCheckRaceReports: a race report the race detector wrote for a
// subprocess (GORACE log_path: one file per pid) fails the test, naming
// the command and the number of races; a file without one does not.
func TestCheckRaceReports(t *testing.T) {
	dir := t.TempDir()
	report := "==================\nWARNING: DATA RACE\nRead at 0x00c by goroutine 6:\n==================\n"
	if err := os.WriteFile(filepath.Join(dir, "race.101"), []byte(report+report), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "race.102"), []byte("nothing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &errorsTB{TB: t}
	checkRaceReports(rec, dir, []string{"run", "--feed", "f"})
	if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], "es-changefeed run --feed f: 2 data race(s) (race.101)") {
		t.Fatalf("errors %q, want one naming the command and its 2 races in race.101", rec.errs)
	}
	rec.errs = nil
	checkRaceReports(rec, t.TempDir(), nil)
	if len(rec.errs) != 0 {
		t.Fatalf("errors %q for a directory without reports", rec.errs)
	}
}
