package main

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
