package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// processGlobals are the calls that change state shared by the whole
// process: only package main may make them (newLogger sets go-redis's
// logger; the metrics are served from registries passed in).
var processGlobals = map[string][]string{
	"github.com/redis/go-redis/v9": {"SetLogger"},
	"log/slog":                     {"SetDefault", "SetLogLoggerLevel"},
	"log":                          {"SetOutput", "SetFlags", "SetPrefix"},
	"github.com/prometheus/client_golang/prometheus": {"MustRegister", "Register", "Unregister"},
	"net/http": {"Handle", "HandleFunc"},
}

// TestLibraries_LeaveProcessGlobalsAlone: no package but main (test files
// aside) calls one of processGlobals, such as redis.SetLogger: a library
// that did would change the logging or metrics of every program that
// imports it.
func TestLibraries_LeaveProcessGlobalsAlone(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		checked++
		banned := map[string][]string{} // local import name → banned functions
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			fns, ok := processGlobals[p]
			if !ok {
				continue
			}
			name := p[strings.LastIndex(p, "/")+1:]
			if p == "github.com/redis/go-redis/v9" {
				name = "redis"
			}
			if imp.Name != nil {
				name = imp.Name.Name
			}
			banned[name] = fns
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			for _, fn := range banned[pkg.Name] {
				if sel.Sel.Name == fn {
					t.Errorf("%s: %s.%s in package %s: only main may set process-wide state", fset.Position(call.Pos()), pkg.Name, fn, f.Name.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d library files: the walk missed the tree", checked)
	}
}
