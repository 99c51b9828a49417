package engines

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
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
	return prepare(ctx, e, false)
}

// PrepareSecure is Prepare with the engine's security plugin on the class
// path (see Config.Security): OpenSearch's opensearch-security zip,
// unpacked, or Elasticsearch's x-pack-core and x-pack-security.
func PrepareSecure(ctx context.Context, e Engine) (Classpath, error) {
	return prepare(ctx, e, true)
}

func prepare(ctx context.Context, e Engine, secure bool) (Classpath, error) {
	javaHome, err := e.JavaHome()
	if err != nil {
		return Classpath{}, err
	}
	sec := ""
	if secure {
		if _, err := securityOf(e); err != nil {
			return Classpath{}, err
		}
		sec = "-security"
	}
	key := launcherHash(e)
	dir := filepath.Join(CacheDir(), e.Name+"-"+e.Version+sec+"-"+key)
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
	profiles := e.Name
	if secure {
		profiles += "," + e.Name + "-security"
	}
	args := []string{"-q", "-B", "-f", filepath.Join(src, "pom.xml"), "-P" + profiles,
		"-Dengine.version=" + e.Version, "-Dengine.out=" + filepath.Join(dir, "build"),
		"package", "dependency:build-classpath", "-Dmdep.outputFile=" + tmp}
	if e.Log4j != "" {
		args = append(args, "-Dlog4j.version="+e.Log4j)
	}
	if secure {
		p, _ := securityOf(e)
		if p.Version != "" {
			args = append(args, "-Dsecurity.version="+p.Version)
		}
	}
	cmd := exec.CommandContext(ctx, "mvn", args...)
	if secure {
		// Secured Elasticsearch compiles a plugin against the engine's
		// jars, which may need a newer Java than Maven's default.
		cmd.Env = append(os.Environ(), "JAVA_HOME="+javaHome)
	}
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
	if b, err = unpackPluginZips(strings.TrimSpace(string(b)), filepath.Join(dir, "plugin")); err != nil {
		return cp, fmt.Errorf("resolve %s: %w", e, err)
	}
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return cp, err
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

// unpackPluginZips replaces each .zip of the class path (a plugin as
// OpenSearch publishes it: its jar, its dependencies' jars, config/ and
// tools/) by the jars it holds, unpacked under dst, leaving out those the
// class path already has in some version (netty, the REST clients,
// commons-codec…: the engine's own win). config/ is unpacked too
// (dst/config), for the plugin's default files.
func unpackPluginZips(classpath, dst string) ([]byte, error) {
	entries := strings.Split(classpath, ":")
	have := map[string]bool{}
	for _, p := range entries {
		if strings.HasSuffix(p, ".jar") {
			have[artifactName(filepath.Base(p))] = true
		}
	}
	var out []string
	for _, p := range entries {
		if !strings.HasSuffix(p, ".zip") {
			out = append(out, p)
			continue
		}
		zr, err := zip.OpenReader(p)
		if err != nil {
			return nil, fmt.Errorf("open plugin %s: %w", p, err)
		}
		for _, f := range zr.File {
			name := filepath.Clean(f.Name)
			if f.FileInfo().IsDir() || strings.HasPrefix(name, "..") || filepath.IsAbs(name) {
				continue
			}
			isJar := !strings.Contains(name, "/") && strings.HasSuffix(name, ".jar")
			if !isJar && !strings.HasPrefix(name, "config/") {
				continue
			}
			if isJar && have[artifactName(name)] {
				continue
			}
			target := filepath.Join(dst, name)
			if err := extract(f, target); err != nil {
				zr.Close()
				return nil, fmt.Errorf("unpack %s of %s: %w", name, p, err)
			}
			if isJar {
				have[artifactName(name)] = true
				out = append(out, target)
			}
		}
		zr.Close()
	}
	return []byte(strings.Join(out, ":")), nil
}

// artifactName is a jar's name without its version: netty-codec of
// netty-codec-4.1.125.Final.jar.
func artifactName(jar string) string {
	base := strings.TrimSuffix(jar, ".jar")
	parts := strings.Split(base, "-")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" && parts[i][0] >= '0' && parts[i][0] <= '9' {
			return strings.Join(parts[:i], "-")
		}
	}
	return base
}

func extract(f *zip.File, target string) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	r, err := f.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := os.Create(target)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
