package engines

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// The launcher's Maven project, embedded so that the package builds it from
// wherever it runs (go test, go run, another checkout).
//
//go:embed launcher/pom.xml launcher/src
var launcherFS embed.FS

// Classpath is what runs one engine's node: the JDK and the class path of
// the launcher and the engine's jars.
type Classpath struct {
	Engine   Engine
	JavaHome string
	// Path is the -cp argument: the launcher jar, then the engine's jars
	// (in ~/.m2).
	Path string
	// Dir is the build's cache directory.
	Dir string
}

// ErrNoMaven marks a machine without mvn on PATH.
var ErrNoMaven = errors.New("mvn not found on PATH: install Maven and a JDK 17 with `apt-get install -y maven openjdk-17-jdk-headless` (make test does this)")

// CacheDir is where built classpaths are kept: ESCF_ENGINES_CACHE, else
// <user cache dir>/escf-engines.
func CacheDir() string {
	if d := os.Getenv("ESCF_ENGINES_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "escf-engines")
}

// Prepare builds the launcher and resolves the engine's jars with Maven
// (downloading them into ~/.m2 the first time), once per engine, version
// and launcher source: later calls, in this or another process, find the
// result in CacheDir. Concurrent calls wait for each other (a file lock).
func Prepare(ctx context.Context, e Engine) (Classpath, error) {
	javaHome, err := e.JavaHome()
	if err != nil {
		return Classpath{}, err
	}
	key := launcherHash(e)
	dir := filepath.Join(CacheDir(), e.Name+"-"+e.Version+"-"+key)
	cp := Classpath{Engine: e, JavaHome: javaHome, Dir: dir}
	if err := os.MkdirAll(CacheDir(), 0o755); err != nil {
		return cp, err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return cp, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return cp, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	done := filepath.Join(dir, "classpath.txt")
	if b, err := os.ReadFile(done); err == nil && len(b) > 0 {
		cp.Path = launcherJar(dir) + ":" + strings.TrimSpace(string(b))
		return cp, nil
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		return cp, ErrNoMaven
	}
	if err := os.RemoveAll(dir); err != nil {
		return cp, err
	}
	src := filepath.Join(dir, "src")
	if err := writeLauncher(src); err != nil {
		return cp, err
	}
	tmp := filepath.Join(dir, "classpath.tmp")
	args := []string{"-q", "-B", "-f", filepath.Join(src, "pom.xml"), "-P" + e.Name,
		"-Dengine.version=" + e.Version, "-Dengine.out=" + filepath.Join(dir, "build"),
		"package", "dependency:build-classpath", "-Dmdep.outputFile=" + tmp}
	if e.Log4j != "" {
		args = append(args, "-Dlog4j.version="+e.Log4j)
	}
	cmd := exec.CommandContext(ctx, "mvn", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return cp, fmt.Errorf("resolve %s with Maven (mvn %s): %w\n%s", e, strings.Join(args, " "), err, tail(out.String(), 40))
	}
	b, err := os.ReadFile(tmp)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return cp, fmt.Errorf("resolve %s: Maven wrote no class path (%v)\n%s", e, err, tail(out.String(), 40))
	}
	if _, err := os.Stat(launcherJar(dir)); err != nil {
		return cp, fmt.Errorf("build the launcher for %s: %w\n%s", e, err, tail(out.String(), 40))
	}
	if err := os.Rename(tmp, done); err != nil {
		return cp, err
	}
	cp.Path = launcherJar(dir) + ":" + strings.TrimSpace(string(b))
	return cp, nil
}

func launcherJar(dir string) string {
	return filepath.Join(dir, "build", "escf-engines-launcher-1.jar")
}

// launcherHash identifies the launcher's source and the engine line, so a
// change to either builds anew.
func launcherHash(e Engine) string {
	h := sha256.New()
	fmt.Fprintf(h, "%+v\n", e)
	_ = fs.WalkDir(launcherFS, "launcher", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := launcherFS.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d\n", p, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func writeLauncher(dst string) error {
	return fs.WalkDir(launcherFS, "launcher", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, "launcher"), "/")
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := launcherFS.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
