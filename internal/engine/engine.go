package engine

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

// Line is one line of versions.txt: a product at a pinned version.
type Line struct {
	// Name is what everything calls the line: opensearch-2,
	// elasticsearch-9, …
	Name string
	// Product is "opensearch" or "elasticsearch".
	Product string
	// Version is the pinned version, e.g. "9.5.3".
	Version string
	// Java is the lowest Java major the engine runs on.
	Java int
	// Log4j is log4j-core's version where the server's pom marks it
	// optional, else "".
	Log4j string
	// Alias is another name Lookup accepts (the emulator's former one,
	// e.g. "es-9"), or "".
	Alias string
	// Compose is the file of compose/ that runs the line, e.g.
	// "es-9.5.yml".
	Compose string
}

//go:embed versions.txt
var versionsTxt string

var lines = mustParse(versionsTxt)

// Lines returns every line in the order of versions.txt.
func Lines() []Line { return append([]Line(nil), lines...) }

// Names returns the lines' names in the order of versions.txt.
func Names() []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.Name
	}
	return out
}

// Lookup returns the line called name (or its alias), case and spaces
// around it aside.
func Lookup(name string) (Line, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, l := range lines {
		if n == l.Name || (l.Alias != "" && n == l.Alias) {
			return l, nil
		}
	}
	return Line{}, fmt.Errorf("unknown engine %q: want one of %s", name, strings.Join(Names(), ", "))
}

// OpenSearch reports whether the line is OpenSearch.
func (l Line) OpenSearch() bool { return l.Product == "opensearch" }

// Display is "OpenSearch" or "Elasticsearch".
func (l Line) Display() string {
	if l.OpenSearch() {
		return "OpenSearch"
	}
	return "Elasticsearch"
}

// String is e.g. "opensearch-2 (OpenSearch 2.19.6)".
func (l Line) String() string { return fmt.Sprintf("%s (%s %s)", l.Name, l.Display(), l.Version) }

// Major, Minor and Patch are the parts of Version.
func (l Line) Major() int { return l.part(0) }
func (l Line) Minor() int { return l.part(1) }
func (l Line) Patch() int { return l.part(2) }

// Series is the major and minor version, e.g. "9.5".
func (l Line) Series() string { return fmt.Sprintf("%d.%d", l.Major(), l.Minor()) }

func (l Line) part(i int) int {
	n, _ := strconv.Atoi(strings.Split(l.Version, ".")[i]) // parse checked three numbers
	return n
}

func mustParse(s string) []Line {
	ls, err := parse(s)
	if err != nil {
		panic("internal/engine/versions.txt: " + err.Error())
	}
	return ls
}

// columns are versions.txt's fields, in order.
const columns = "name product version java log4j alias compose"

func parse(s string) ([]Line, error) {
	var out []Line
	seen := map[string]bool{}
	for n, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if want := len(strings.Fields(columns)); len(f) != want {
			return nil, fmt.Errorf("line %d: want %d fields (%s), got %q", n+1, want, columns, line)
		}
		java, err := strconv.Atoi(f[3])
		if err != nil {
			return nil, fmt.Errorf("line %d: java %q is not a number", n+1, f[3])
		}
		if f[1] != "opensearch" && f[1] != "elasticsearch" {
			return nil, fmt.Errorf("line %d: product %q is neither opensearch nor elasticsearch", n+1, f[1])
		}
		parts := strings.Split(f[2], ".")
		if len(parts) != 3 {
			return nil, fmt.Errorf("line %d: version %q: want major.minor.patch", n+1, f[2])
		}
		for _, p := range parts {
			if _, err := strconv.Atoi(p); err != nil {
				return nil, fmt.Errorf("line %d: version %q: want major.minor.patch", n+1, f[2])
			}
		}
		l := Line{Name: f[0], Product: f[1], Version: f[2], Java: java, Log4j: dash(f[4]), Alias: dash(f[5]), Compose: dash(f[6])}
		if want := l.Product + "-" + parts[0]; l.Name != want {
			return nil, fmt.Errorf("line %d: name %q: want %q (product-major)", n+1, l.Name, want)
		}
		for _, name := range []string{l.Name, l.Alias} {
			if name != "" && seen[name] {
				return nil, fmt.Errorf("line %d: %q names two lines", n+1, name)
			}
			seen[name] = true
		}
		out = append(out, l)
	}
	return out, nil
}

func dash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}
