package engine

import (
	"fmt"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, in string
		want     []Line
		wantErr  string
	}{
		{name: "comment and blank", in: "# c\n\nopensearch-2 opensearch 2.19.6 17 2.25.4 - opensearch-2.19.yml\n",
			want: []Line{{Name: "opensearch-2", Product: "opensearch", Version: "2.19.6", Java: 17, Log4j: "2.25.4", Compose: "opensearch-2.19.yml"}}},
		{name: "alias, no log4j", in: "elasticsearch-9 elasticsearch 9.5.3 21 - es-9 es-9.5.yml",
			want: []Line{{Name: "elasticsearch-9", Product: "elasticsearch", Version: "9.5.3", Java: 21, Alias: "es-9", Compose: "es-9.5.yml"}}},
		{name: "short line", in: "opensearch-2 opensearch 2.19.6 17 - -", wantErr: "want 7 fields"},
		{name: "bad java", in: "opensearch-1 opensearch 1.0.0 seventeen - - -", wantErr: `java "seventeen"`},
		{name: "bad product", in: "solr-9 solr 9.0.0 17 - - -", wantErr: `product "solr"`},
		{name: "bad version", in: "opensearch-2 opensearch 2.19 17 - - -", wantErr: `version "2.19"`},
		{name: "name not product-major", in: "es-9 elasticsearch 9.5.3 21 - - -", wantErr: `name "es-9": want "elasticsearch-9"`},
		{name: "alias of another line", in: "opensearch-2 opensearch 2.19.6 17 - os -\nopensearch-3 opensearch 3.9.0 21 - os -", wantErr: `"os" names two lines`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parse(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	tests := []struct {
		name, in, want, wantErr string
	}{
		{name: "name", in: "elasticsearch-9", want: "elasticsearch-9"},
		{name: "alias", in: "es-9", want: "elasticsearch-9"},
		{name: "case and spaces", in: " OpenSearch-3 ", want: "opensearch-3"},
		{name: "unknown", in: "solr-9", wantErr: `unknown engine "solr-9": want one of ` + strings.Join(Names(), ", ")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Lookup(tt.in)
			switch {
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Fatalf("Lookup(%q) = %v, want %q", tt.in, err, tt.wantErr)
			case tt.wantErr == "" && (err != nil || got.Name != tt.want):
				t.Fatalf("Lookup(%q) = %v, %v, want %s", tt.in, got, err, tt.want)
			}
		})
	}
}

// TestLines: the pinned table itself parses into lines whose version
// parts and compose file are there.
func TestLines(t *testing.T) {
	if len(Lines()) == 0 {
		t.Fatal("versions.txt has no line")
	}
	for _, l := range Lines() {
		if got := fmt.Sprintf("%d.%d.%d", l.Major(), l.Minor(), l.Patch()); got != l.Version {
			t.Errorf("%s: parts %s of version %s", l.Name, got, l.Version)
		}
		if l.Compose == "" {
			t.Errorf("%s: no compose file", l.Name)
		}
	}
}
