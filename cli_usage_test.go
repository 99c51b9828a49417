package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRunMain_UnknownFlag: a mistyped flag is said once, on one line, with
// the flag meant when one is a typo away and where the help is; exit 2,
// nothing on stdout (urfave/cli's default printed the error twice and then
// the whole help).
func TestRunMain_UnknownFlag(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // in the one line; "" with notWant: no suggestion
		no   string
	}{
		{"run", []string{"run", "--indx", "x"}, "unknown flag --indx: did you mean --index? (es-changefeed run --help lists its flags)", ""},
		{"consume", []string{"consume", "--grup", "g"}, "did you mean --group?", ""},
		{"status", []string{"status", "--fead", "f"}, "did you mean --feed?", ""},
		{"far from any", []string{"run", "--zzzzzz"}, "unknown flag --zzzzzz (es-changefeed run --help", "did you mean"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runMain(append([]string{"es-changefeed"}, tt.args...), &stdout, &stderr)
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if code != exitUsage || stdout.Len() != 0 || len(lines) != 1 {
				t.Fatalf("exit %d, stdout %q, %d stderr lines:\n%s\nwant exit %d, one line, nothing on stdout", code, stdout.String(), len(lines), stderr.String(), exitUsage)
			}
			if !strings.Contains(lines[0], tt.want) || (tt.no != "" && strings.Contains(lines[0], tt.no)) {
				t.Errorf("stderr %q: want %q in it%s", lines[0], tt.want, map[bool]string{true: ", and not " + tt.no}[tt.no != ""])
			}
		})
	}
}

// TestHelp_DefaultsOnce: every flag of every command says its default at
// most once, in urfave/cli's form "(default: …)", never in its usage text
// beside it (--prefetch said "(default 16 × workers) (default: 0)").
func TestHelp_DefaultsOnce(t *testing.T) {
	for _, c := range []string{"run", "resync", "consume", "status", "demo", "version"} {
		t.Run(c, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := runMain([]string{"es-changefeed", c, "--help"}, &stdout, &stderr); code != exitOK {
				t.Fatalf("%s --help: exit %d: %s", c, code, stderr.String())
			}
			flags := 0
			for _, l := range strings.Split(stdout.String(), "\n") {
				if !strings.HasPrefix(strings.TrimSpace(l), "--") {
					continue
				}
				flags++
				if n := strings.Count(l, "(default"); n > 1 || strings.Contains(l, "(default ") {
					t.Errorf("%s --help: %q says its default %d times, or not as \"(default: …)\"", c, strings.TrimSpace(l), n)
				}
			}
			if flags == 0 && c != "version" {
				t.Fatalf("%s --help lists no flags:\n%s", c, stdout.String())
			}
		})
	}
}

// TestDemo_Calm: the demo says in a few lines of its own what runs where,
// and nothing at its defaults warns — not even at --log-level info (a
// mass-delete confirmation, routine in a demo, was a WARN).
func TestDemo_Calm(t *testing.T) {
	for _, level := range []string{"", "info"} {
		t.Run("log-level "+level, func(t *testing.T) {
			args := []string{"es-changefeed", "demo", "--duration", "2s"}
			if level != "" {
				args = append(args, "--log-level", level)
			}
			var stdout, stderr bytes.Buffer
			if code := runMain(args, &stdout, &stderr); code != exitOK {
				t.Fatalf("demo: exit %d:\n%s", code, stderr.String())
			}
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			for _, l := range lines {
				if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
					t.Errorf("the demo warns: %s", l)
				}
				if level == "" && !strings.HasPrefix(l, "demo: ") {
					t.Errorf("at its defaults the demo's stderr holds a line not its own: %s", l)
				}
			}
			if level == "" && len(lines) > 4 {
				t.Errorf("the demo says %d lines on stderr, want a few:\n%s", len(lines), stderr.String())
			}
		})
	}
}
