package main

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// keyLiterals start a spelled key name (or the bootstrap hold group's): in
// product code only redisx/keys.go may hold them.
var keyLiterals = []string{`"escf:`, "`escf:", `"escf-bootstrap:`}

// TestProduct_KeyNamesOnlyInKeysGo: no product .go file (tests and the
// test harness under tests/ aside) but redisx/keys.go spells a key name,
// even in a comment: a name built elsewhere is one a change of the layout
// misses.
func TestProduct_KeyNamesOnlyInKeysGo(t *testing.T) {
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || path == "tests") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || path == filepath.Join("redisx", "keys.go") {
			return nil
		}
		checked++
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			for _, lit := range keyLiterals {
				if strings.Contains(sc.Text(), lit) {
					t.Errorf("%s:%d spells %s…: build the name with redisx/keys.go (and add it to redisx.Layout and the README's Keys table if it is new)", path, n, lit)
				}
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d product files: the walk missed the tree", checked)
	}
}

// readmeKeys reads the README's Keys table: each key pattern (a
// backquoted name starting with escf in the first column) with its type
// (second column, "set, hash" for two keys in one row). Names beyond the
// row's types are references ("group X of <stream>").
func readmeKeys(tb testing.TB) map[string]string {
	tb.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		tb.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n### Keys\n")
	if !ok {
		tb.Fatal(`README.md has no "### Keys" section`)
	}
	section, _, _ = strings.Cut(section, "\n#")
	name := regexp.MustCompile("`(escf[^`]*)`")
	out := map[string]string{}
	rows := 0
	for line := range strings.SplitSeq(section, "\n") {
		cells := strings.SplitN(strings.TrimPrefix(line, "| "), " | ", 3)
		if !strings.HasPrefix(line, "| ") || len(cells) < 3 || cells[0] == "key" {
			continue
		}
		rows++
		names := name.FindAllStringSubmatch(cells[0], -1)
		types := strings.Split(cells[1], ", ")
		if len(names) < len(types) {
			tb.Errorf("README Keys row %q: %d names for %d types", cells[0], len(names), len(types))
			continue
		}
		for i, typ := range types {
			key := names[i][1]
			if prev, ok := out[key]; ok && prev != typ {
				tb.Errorf("README Keys table: %s is a %s in one row and a %s in another", key, prev, typ)
			}
			out[key] = typ
		}
	}
	if rows == 0 {
		tb.Fatal("README.md: the Keys section has no table rows")
	}
	return out
}

// TestReadme_KeysTableIsTheLayout: the README's Keys table lists exactly
// the kinds of key redisx.Layout lists (which TestLayout_Constructors holds
// to the constructors), with the same types.
func TestReadme_KeysTableIsTheLayout(t *testing.T) {
	readme := readmeKeys(t)
	for _, s := range redisx.Layout() {
		typ, ok := readme[s.Pattern]
		switch {
		case !ok:
			t.Errorf("README.md's Keys table lacks %s (%s: %s), which the code uses", s.Pattern, s.Type, s.Content)
		case typ != s.Type:
			t.Errorf("README.md's Keys table says %s is a %s; redisx.Layout says %s", s.Pattern, typ, s.Type)
		}
		delete(readme, s.Pattern)
	}
	for key, typ := range readme {
		t.Errorf("README.md's Keys table lists %s (%s), which redisx.Layout does not: a key the code no longer uses, or a name that differs", key, typ)
	}
}
