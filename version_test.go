package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionText(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/es-changefeed/es-changefeed", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"}, {Key: "CGO_ENABLED", Value: "0"},
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "2d7d73b0c0ffee"},
			{Key: "vcs.time", Value: "2026-12-02T06:00:00Z"}, {Key: "vcs.modified", Value: "true"},
		}}
	tests := []struct {
		name    string
		version string
		rev     string
		bi      *debug.BuildInfo
		want    string
	}{
		{name: "no build info", version: "dev", bi: nil, want: "es-changefeed dev\n"},
		{name: "no build info, -X main.revision", version: "v1.0.0", rev: "0123abcd", bi: nil, want: "es-changefeed v1.0.0\nrevision: 0123abcd\n"},
		{name: "vcs stamped wins over -X main.revision", version: "v1.2.0", rev: "ignored", bi: stamped,
			want: "es-changefeed v1.2.0\ngo: go1.26.8\nplatform: linux/arm64\nrevision: 2d7d73b0c0ffee\ntime: 2026-12-02T06:00:00Z\nmodified: true\ncgo: 0\n"},
		{name: "no vcs, -X main.revision", version: "v1.2.0", rev: "0123abcd", bi: &debug.BuildInfo{GoVersion: "go1.26.8"},
			want: "es-changefeed v1.2.0\ngo: go1.26.8\nrevision: 0123abcd\n"},
		{name: "vcs stamped", version: "v1.2.0", bi: stamped,
			want: "es-changefeed v1.2.0\ngo: go1.26.8\nplatform: linux/arm64\nrevision: 2d7d73b0c0ffee\ntime: 2026-12-02T06:00:00Z\nmodified: true\ncgo: 0\n"},
		{name: "no vcs, a module version", version: "dev",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/es-changefeed/es-changefeed", Version: "v1.3.0"}},
			want: "es-changefeed dev\ngo: go1.26.8\nmodule: github.com/es-changefeed/es-changefeed v1.3.0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := versionText(tt.version, tt.rev, tt.bi), tt.want; got != want {
				t.Errorf("versionText:\n got %q\nwant %q", got, want)
			}
		})
	}
}

// TestRunMain_Version: the version command and the --version flag print
// the same text, exit 0, and write nothing to stderr.
func TestRunMain_Version(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := runMain(append([]string{"es-changefeed"}, args...), &stdout, &stderr); code != exitOK {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			got := stdout.String()
			if !strings.HasPrefix(got, "es-changefeed "+version+"\n") || !strings.Contains(got, "\ngo: go1.") {
				t.Errorf("output %q: want the version line, then the Go version", got)
			}
			if stderr.Len() != 0 {
				t.Errorf("stderr %q: want nothing", stderr.String())
			}
		})
	}
}

// TestVersion_Ldflags: -ldflags -X main.version and main.revision set what
// the binary prints when Go cannot stamp the revision (as make and the
// Dockerfile build it).
func TestVersion_Ldflags(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "es-changefeed")
	build := exec.Command("go", "build", "-buildvcs=false", "-ldflags", "-X main.version=v9.8.7-test -X main.revision=0123abcd", "-o", bin, ".")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil {
			t.Fatalf("es-changefeed %s: %v", arg, err)
		}
		if got, want := strings.SplitN(string(out), "\n", 2)[0], "es-changefeed v9.8.7-test"; got != want {
			t.Errorf("es-changefeed %s: first line %q, want %q", arg, got, want)
		}
		if !strings.Contains(string(out), "\nrevision: 0123abcd\n") {
			t.Errorf("es-changefeed %s: %q lacks the revision set with -ldflags (built with -buildvcs=false, as make and the Dockerfile do)", arg, out)
		}
		if !strings.Contains(string(out), "\ncgo: 0\n") {
			t.Errorf("es-changefeed %s: %q lacks cgo: 0 (a static build)", arg, out)
		}
	}
}
