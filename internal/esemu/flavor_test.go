package esemu

import (
	"testing"

	"github.com/es-changefeed/es-changefeed/internal/engine"
)

// TestFlavors_EngineTable: the emulator has one flavor per line of the
// engine table, named as the line (its former alias accepted), answering
// with the line's product and version; it has no build of a line the
// table does not pin.
func TestFlavors_EngineTable(t *testing.T) {
	lines := engine.Lines()
	if len(Flavors) != len(lines) {
		t.Errorf("flavors %v, engine lines %v: give each line a build in flavor.go", Flavors, engine.Names())
	}
	for _, l := range lines {
		for _, name := range []string{l.Name, l.Alias} {
			if name == "" {
				continue
			}
			f, err := ParseFlavor(name)
			switch {
			case err != nil:
				t.Errorf("ParseFlavor(%q): %v", name, err)
			case string(f) != l.Name || f.Version() != l.Version || f.OpenSearch() != l.OpenSearch():
				t.Errorf("ParseFlavor(%q) = %s answering %s (OpenSearch %v), want %s", name, f, f.Version(), f.OpenSearch(), l)
			}
		}
	}
	for f := range builds {
		if _, err := engine.Lookup(string(f)); err != nil {
			t.Errorf("flavor.go has a build of %s: %v", f, err)
		}
	}
	if _, err := ParseFlavor("solr-9"); err == nil {
		t.Error(`ParseFlavor("solr-9") succeeded`)
	}
}
