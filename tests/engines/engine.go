package engines

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Engine is one line of versions.txt: a product at a pinned version.
type Engine struct {
	// Name is what tests and the command call it: opensearch-2,
	// opensearch-3, elasticsearch-7, elasticsearch-8, elasticsearch-9.
	Name string
	// Product is "opensearch" or "elasticsearch" (also the Java package:
	// org.<product>).
	Product string
	// Version is the Maven version of the server, HTTP transport and test
	// framework jars.
	Version string
	// Java is the lowest Java major the engine runs on.
	Java int
	// Log4j is log4j-core's version where the server's pom marks it
	// optional, else "".
	Log4j string
}

// DefaultEngine is the engine make test runs the real-cluster suite on: it
// runs on Debian 12's Java 17.
const DefaultEngine = "opensearch-2"

//go:embed versions.txt
var versionsTxt string

var all = mustParseVersions(versionsTxt)

// All returns every pinned engine in the order of versions.txt.
func All() []Engine { return append([]Engine(nil), all...) }

// Names returns the engines' names in the order of versions.txt.
func Names() []string {
	out := make([]string, len(all))
	for i, e := range all {
		out[i] = e.Name
	}
	return out
}

// Lookup returns the engine called name.
func Lookup(name string) (Engine, error) {
	for _, e := range all {
		if e.Name == name {
			return e, nil
		}
	}
	return Engine{}, fmt.Errorf("unknown engine %q: want one of %s", name, strings.Join(Names(), ", "))
}

// String is e.g. "opensearch-2 (OpenSearch 2.19.6)".
func (e Engine) String() string { return fmt.Sprintf("%s (%s %s)", e.Name, e.Display(), e.Version) }

// Display is "OpenSearch" or "Elasticsearch".
func (e Engine) Display() string {
	if e.Product == "opensearch" {
		return "OpenSearch"
	}
	return "Elasticsearch"
}

func mustParseVersions(s string) []Engine {
	es, err := parseVersions(s)
	if err != nil {
		panic("tests/engines/versions.txt: " + err.Error())
	}
	return es
}

func parseVersions(s string) ([]Engine, error) {
	var out []Engine
	for n, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 5 {
			return nil, fmt.Errorf("line %d: want 5 fields (name product version java log4j), got %q", n+1, line)
		}
		java, err := strconv.Atoi(f[3])
		if err != nil {
			return nil, fmt.Errorf("line %d: java %q is not a number", n+1, f[3])
		}
		if f[1] != "opensearch" && f[1] != "elasticsearch" {
			return nil, fmt.Errorf("line %d: product %q is neither opensearch nor elasticsearch", n+1, f[1])
		}
		e := Engine{Name: f[0], Product: f[1], Version: f[2], Java: java, Log4j: f[4]}
		if e.Log4j == "-" {
			e.Log4j = ""
		}
		out = append(out, e)
	}
	return out, nil
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
