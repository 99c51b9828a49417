package main

import (
	"errors"
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// module is the import path of this module.
const module = "github.com/es-changefeed/es-changefeed"

// layers are the dependency order of DESIGN.md §1, top first: a package
// imports packages of the layers below its own, never above. A package
// belongs to the layer of the longest entry that is its path or a parent
// of it ("" is the module root: package main); a package named main (a
// command, e.g. internal/esemu/cmd/esemu) belongs to the top layer.
var layers = [][]string{
	{"", "internal/demo", "internal/cmdflags"}, // the CLI, the demo it runs, the flags its commands share
	{"relay", "consumer"},
	{"deletes", "bootstrap", "sink", "status"},
	{"checkpoint", "idempotency"},
	{"es", "redisx"},
	{"internal"},
}

// sideways are the imports allowed within one layer (between entries of
// layers), besides a package's own subpackages and the small helpers of
// internal/ among themselves.
var sideways = map[[2]string]bool{
	{"", "internal/demo"}:     true, // the demo command runs it
	{"", "internal/cmdflags"}: true, // the commands' shared flags
	{"bootstrap", "sink"}:     true, // the copy applies documents through a sink
}

// forbidden are imports (between entries of layers) the layers would allow
// but DESIGN.md rules out.
var forbidden = map[[2]string]string{
	{"relay", "sink"}:      "relay never imports sink",
	{"checkpoint", "es"}:   "checkpoint knows Redis, not Elasticsearch",
	{"relay", "consumer"}:  "the producer and the consumer side meet only in Redis",
	{"consumer", "relay"}:  "the producer and the consumer side meet only in Redis",
	{"es", "redisx"}:       "es imports no feature package",
	{"redisx", "es"}:       "redisx imports no feature package",
	{"internal", "redisx"}: "internal/ holds helpers below every feature",
}

// onlyImportedBy are packages that only the named product packages (and
// their own subpackages) may import: the emulator ships in the binary for
// demo alone.
var onlyImportedBy = map[string][]string{
	"internal/esemu":    {"internal/demo"},
	"internal/cmdflags": {""},
}

// layerOf returns the layer index and the entry of a module-relative
// package path, or -1.
func layerOf(pkg string, isMain bool) (int, string) {
	if isMain {
		return 0, ""
	}
	best, bestEntry := -1, ""
	for i, l := range layers {
		for _, e := range l {
			if (pkg == e || e == "" && pkg == "" || e != "" && strings.HasPrefix(pkg, e+"/")) && (best < 0 || len(e) > len(bestEntry)) {
				best, bestEntry = i, e
			}
		}
	}
	return best, bestEntry
}

// productPackage is one package of the module outside tests/: its
// module-relative path, whether it is a command, and what its non-test
// files import of the module (module-relative).
type productPackage struct {
	path    string
	isMain  bool
	imports []string
}

// checkImports returns one line per import that breaks the layering.
func checkImports(pkgs []productPackage) []string {
	var bad []string
	for _, p := range pkgs {
		layer, entry := layerOf(p.path, p.isMain)
		if layer < 0 {
			bad = append(bad, p.path+": in no layer of DESIGN.md §1: add it to layers in imports_test.go, where it belongs")
			continue
		}
		for _, imp := range p.imports {
			if imp == "tests" || strings.HasPrefix(imp, "tests/") {
				bad = append(bad, p.path+" imports "+imp+": no product package imports tests/")
				continue
			}
			if only, ok := onlyImportedBy[imp]; ok && !slices.Contains(only, p.path) && !strings.HasPrefix(p.path, imp+"/") {
				bad = append(bad, p.path+" imports "+imp+": only "+strings.Join(only, ", ")+" may")
				continue
			}
			il, ientry := layerOf(imp, false)
			edge := [2]string{entry, ientry}
			switch {
			case il < 0:
				bad = append(bad, p.path+" imports "+imp+", which is in no layer")
			case forbidden[edge] != "":
				bad = append(bad, p.path+" imports "+imp+": "+forbidden[edge])
			case il > layer:
				// down: fine
			case il == layer && (entry == ientry && !p.isMain || sideways[edge]):
				// its own subpackage, a helper beside a helper, or allowed
			default:
				bad = append(bad, p.path+" imports "+imp+": imports point down (main → relay/consumer → deletes/bootstrap/sink → checkpoint/idempotency → es/redisx → internal)")
			}
		}
	}
	return bad
}

// productPackages reads the module's packages outside tests/ with
// go/build: their non-test imports, as the binary would build them.
func productPackages(tb testing.TB) []productPackage {
	tb.Helper()
	var out []productPackage
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || path == "tests") {
			return filepath.SkipDir
		}
		bp, err := build.ImportDir(path, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(bp.GoFiles)+len(bp.CgoFiles) == 0 {
			return nil // tests only (compose/)
		}
		rel := filepath.ToSlash(path)
		if rel == "." {
			rel = ""
		}
		p := productPackage{path: rel, isMain: bp.Name == "main"}
		for _, imp := range bp.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				p.imports = append(p.imports, strings.TrimPrefix(strings.TrimPrefix(imp, module), "/"))
			}
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// TestImports_Layers: the module's product packages (everything outside
// tests/, test files aside) import as DESIGN.md §1 says: down the layers,
// never tests/, the emulator only from demo.
func TestImports_Layers(t *testing.T) {
	pkgs := productPackages(t)
	if len(pkgs) < 15 {
		t.Fatalf("found %d product packages: the walk missed the tree", len(pkgs))
	}
	bad := checkImports(pkgs)
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// TestCheckImports: each rule of checkImports, on a made-up module.
func TestCheckImports(t *testing.T) {
	tests := []struct {
		name string
		pkg  productPackage
		want string // "" allowed
	}{
		{name: "main down to relay", pkg: productPackage{path: "", isMain: true, imports: []string{"relay", "internal/demo", "internal/tlsx"}}},
		{name: "demo runs the emulator", pkg: productPackage{path: "internal/demo", imports: []string{"internal/esemu", "relay", "checkpoint"}}},
		{name: "the emulator's command", pkg: productPackage{path: "internal/esemu/cmd/esemu", isMain: true, imports: []string{"internal/esemu"}}},
		{name: "relay and its partitions", pkg: productPackage{path: "relay", imports: []string{"relay/partition", "deletes", "checkpoint", "es", "redisx"}}},
		{name: "bootstrap through a sink", pkg: productPackage{path: "bootstrap", imports: []string{"sink"}}},
		{name: "es on helpers", pkg: productPackage{path: "es", imports: []string{"internal/urlx", "internal/tlsx"}}},
		{name: "product imports tests", pkg: productPackage{path: "sink", imports: []string{"tests/esemu"}}, want: "no product package imports tests/"},
		{name: "main imports tests", pkg: productPackage{path: "", isMain: true, imports: []string{"tests/esemu"}}, want: "no product package imports tests/"},
		{name: "relay imports sink", pkg: productPackage{path: "relay", imports: []string{"sink"}}, want: "relay never imports sink"},
		{name: "checkpoint imports es", pkg: productPackage{path: "checkpoint", imports: []string{"es"}}, want: "checkpoint knows Redis, not Elasticsearch"},
		{name: "redisx imports a feature", pkg: productPackage{path: "redisx", imports: []string{"checkpoint"}}, want: "imports point down"},
		{name: "redisx imports es", pkg: productPackage{path: "redisx", imports: []string{"es"}}, want: "redisx imports no feature package"},
		{name: "es imports redisx", pkg: productPackage{path: "es", imports: []string{"redisx"}}, want: "es imports no feature package"},
		{name: "es imports a feature", pkg: productPackage{path: "es", imports: []string{"relay"}}, want: "imports point down"},
		{name: "sink imports relay", pkg: productPackage{path: "sink", imports: []string{"relay"}}, want: "imports point down"},
		{name: "sink imports the emulator", pkg: productPackage{path: "sink", imports: []string{"internal/esemu"}}, want: "only internal/demo may"},
		{name: "a helper imports redisx", pkg: productPackage{path: "internal/urlx", imports: []string{"redisx"}}, want: "internal/ holds helpers"},
		{name: "a package in no layer", pkg: productPackage{path: "metrics"}, want: "in no layer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := checkImports([]productPackage{tt.pkg})
			switch {
			case tt.want == "" && len(bad) > 0:
				t.Fatalf("checkImports = %q, want nothing", bad)
			case tt.want != "" && (len(bad) != 1 || !strings.Contains(bad[0], tt.want)):
				t.Fatalf("checkImports = %q, want one line containing %q", bad, tt.want)
			}
		})
	}
}
