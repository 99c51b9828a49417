package engines

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/es-changefeed/es-changefeed/internal/engine"
)

// Engine is one line of the engine table (internal/engine's versions.txt):
// a product at a pinned version, which this package runs from Maven
// Central's jars.
type Engine struct{ engine.Line }

// DefaultEngine is the engine make test runs the real-cluster suite on: it
// runs on Debian 12's Java 17.
const DefaultEngine = "opensearch-2"

// All returns every pinned engine in the order of the table.
func All() []Engine {
	ls := engine.Lines()
	out := make([]Engine, len(ls))
	for i, l := range ls {
		out[i] = Engine{l}
	}
	return out
}

// Names returns the engines' names in the order of the table.
func Names() []string { return engine.Names() }

// Lookup returns the engine called name (or its alias).
func Lookup(name string) (Engine, error) {
	l, err := engine.Lookup(name)
	return Engine{l}, err
}

// jdk is an installed Java.
type jdk struct {
	home  string
	major int
}

// JavaHome returns the JDK that runs the engine: ESCF_JAVA_HOME if set,
// else the oldest JDK of major e.Java or later among $JAVA_HOME and
// /usr/lib/jvm/* (an engine built for Java 17 may not start on the newest
// Java). The error says which Java to install.
func (e Engine) JavaHome() (string, error) {
	if h := os.Getenv("ESCF_JAVA_HOME"); h != "" {
		return h, nil
	}
	var found []jdk
	seen := map[string]bool{}
	cands, _ := filepath.Glob("/usr/lib/jvm/*")
	if h := os.Getenv("JAVA_HOME"); h != "" {
		cands = append([]string{h}, cands...)
	}
	for _, c := range cands {
		real, err := filepath.EvalSymlinks(c)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		if m := javaMajor(real); m > 0 {
			if _, err := os.Stat(filepath.Join(real, "bin", "java")); err == nil {
				found = append(found, jdk{real, m})
			}
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].major < found[j].major })
	for _, j := range found {
		if j.major >= e.Java {
			return j.home, nil
		}
	}
	have := make([]string, len(found))
	for i, j := range found {
		have[i] = fmt.Sprintf("%s (%d)", j.home, j.major)
	}
	hint := "apt-get install -y openjdk-17-jdk-headless"
	if e.Java > 17 {
		hint = fmt.Sprintf("install a JDK %d or later (Debian 12 has none; e.g. Temurin) and set ESCF_JAVA_HOME to it", e.Java)
	}
	return "", fmt.Errorf("%s needs Java %d or later, found %v: %s", e, e.Java, have, hint)
}

// javaMajor reads JAVA_VERSION from a JDK's release file (0 if none).
func javaMajor(home string) int {
	b, err := os.ReadFile(filepath.Join(home, "release"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "JAVA_VERSION=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"`)
		v = strings.TrimPrefix(v, "1.") // 1.8.0_x
		end := 0
		for end < len(v) && v[end] >= '0' && v[end] <= '9' {
			end++
		}
		m, _ := strconv.Atoi(v[:end])
		return m
	}
	return 0
}
