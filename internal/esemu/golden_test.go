package esemu_test

// The golden conformance test: the script of tests/golden, recorded on the
// real engines (the versions of the engine table) by tests/golden/cmd/golden into
// testdata/golden/<engine>/, replayed on a fresh emulator of the matching
// flavor; each answer must match the engine's by shape (and by value where
// the relay reads a deterministic value; see golden.Compare). It reads
// testdata only: no Java.

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/tests/golden"
)

func TestGolden(t *testing.T) {
	for _, target := range golden.Targets {
		t.Run(target.Engine, func(t *testing.T) {
			t.Parallel()
			testGolden(t, target)
		})
	}
}

func testGolden(t *testing.T, target golden.Target) {
	rerecord := "go run ./tests/golden/cmd/golden --engine " + target.Engine
	dir := filepath.Join("testdata", "golden", target.Engine)
	files, err := golden.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no goldens in %s: record them with %s", dir, rerecord)
	}
	flavor, err := esemu.ParseFlavor(target.Engine)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := esemu.New(esemu.Config{Flavor: flavor, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Errorf("close the emulator: %v", err)
		}
	})

	ctx := context.Background()
	r := &golden.Runner{URL: cl.URL()}
	wantVars := map[string]string{}
	steps := golden.Script(target)
	for i, s := range steps {
		name := golden.FileName(i, s)
		f, ok := files[name]
		delete(files, name)
		// Run the step even without its golden: later steps need the
		// state it makes.
		got, err := r.Do(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range f.Captured {
			wantVars[k] = v
		}
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			if !ok {
				t.Fatalf("no golden %s/%s: re-record with %s", dir, name, rerecord)
			}
			if same, why := golden.SameRequest(f, s); !same {
				t.Fatalf("the golden is stale (%s): re-record with %s", why, rerecord)
			}
			if f.Engine != target.Recorded {
				t.Fatalf("the golden was recorded on %s, the engine table pins %s: re-record with %s", f.Engine, target.Recorded, rerecord)
			}
			switch {
			case f.Skipped != "" && got.Skipped != "":
				t.Skipf("skipped on the engine (%s)", f.Skipped)
			case f.Skipped != "":
				t.Fatalf("the engine skipped the step (%s), the emulator ran it (status %d)", f.Skipped, got.Status)
			case got.Skipped != "":
				t.Fatalf("the emulator skipped the step (%s), the engine answered %d", got.Skipped, f.Response.Status)
			case f.Unreliable != "":
				t.Skipf("not compared: %s", f.Unreliable)
			}
			for _, d := range golden.Compare(s, *f.Response, *got.Response(), wantVars, r.Vars()) {
				t.Errorf("%s %s: %s", s.Method, s.Path, d)
			}
		})
	}
	for name := range files {
		t.Errorf("%s/%s is not in the script: re-record with %s", dir, name, rerecord)
	}
}
