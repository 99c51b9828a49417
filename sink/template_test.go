package sink

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/redisx"
)

func TestParseKeyTemplate(t *testing.T) {
	e := redisx.Event{Op: redisx.OpUpsert, Index: "orders", IndexUUID: "U1", Shard: 3, ID: "42", Routing: "r7"}
	tests := []struct {
		name    string
		tmpl    string
		want    string   // Key(e)
		wantErr []string // parts of the error message
	}{
		{name: "default", tmpl: DefaultRedisKey, want: "cache:orders:42"},
		{name: "every placeholder", tmpl: "{index}|{index_uuid}|{shard}|{id}|{routing}", want: "orders|U1|3|42|r7"},
		{name: "only the id", tmpl: "{id}", want: "42"},
		{name: "literal braces make a hash tag", tmpl: "cache:{{c}}:{index}:{id}", want: "cache:{c}:orders:42"},
		{name: "adjacent placeholders", tmpl: "{index}{id}", want: "orders42"},
		{name: "unknown placeholder named", tmpl: "cache:{idx}:{id}", wantErr: []string{`unknown placeholder "{idx}"`, "{index}, {index_uuid}"}},
		{name: "every unknown placeholder named", tmpl: "{a}:{id}:{b c}", wantErr: []string{`unknown placeholders "{a}", "{b c}"`}},
		{name: "empty placeholder", tmpl: "{}:{id}", wantErr: []string{`"{}"`}},
		{name: "case matters", tmpl: "{ID}", wantErr: []string{`"{ID}"`}},
		{name: "unclosed", tmpl: "cache:{id", wantErr: []string{"offset 6 is not closed"}},
		{name: "lone close", tmpl: "cache}:{id}", wantErr: []string{"lone '}' at offset 5"}},
		{name: "no id", tmpl: "cache:{index}", wantErr: []string{"no {id}"}},
		{name: "empty", tmpl: "", wantErr: []string{"empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tpl, err := ParseKeyTemplate(tt.tmpl)
			if tt.wantErr != nil {
				if !errors.Is(err, ErrBadTemplate) {
					t.Fatalf("err = %v, want ErrBadTemplate", err)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err = %v, want it to contain %s", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tpl.Key(e); got != tt.want {
				t.Errorf("Key = %q, want %q", got, tt.want)
			}
			if got := tpl.String(); got != tt.tmpl {
				t.Errorf("String = %q, want %q", got, tt.tmpl)
			}
		})
	}
}

// tplCanonical renders parsed parts back into template syntax.
func tplCanonical(parts []tplPart) string {
	names := map[tplField]string{}
	for n, f := range tplFields {
		names[f] = n
	}
	var b strings.Builder
	for _, p := range parts {
		if p.field == tplLiteral {
			b.WriteString(strings.NewReplacer("{", "{{", "}", "}}").Replace(p.lit))
			continue
		}
		b.WriteString("{" + names[p.field] + "}")
	}
	return b.String()
}

func FuzzParseKeyTemplate(f *testing.F) {
	for _, s := range []string{DefaultRedisKey, "cache:{{c}}:{index}:{id}", "{index_uuid}/{shard}/{id}/{routing}", "{id", "}{id}", "{x}{y}", "{{{id}}}", "", "{{}}{id}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tpl, err := ParseKeyTemplate(s)
		if err != nil {
			if !errors.Is(err, ErrBadTemplate) {
				t.Fatalf("error %v does not wrap ErrBadTemplate", err)
			}
			return
		}
		// Parsing is lossless: the canonical form parses to the same parts.
		canon := tplCanonical(tpl.parts)
		again, err := ParseKeyTemplate(canon)
		if err != nil {
			t.Fatalf("canonical form %q of %q: %v", canon, s, err)
		}
		if !reflect.DeepEqual(again.parts, tpl.parts) {
			t.Fatalf("%q and its canonical form %q parse differently", s, canon)
		}
		// Keys differ by id: documents never share a key.
		e := redisx.Event{Op: redisx.OpUpsert, Index: "i", IndexUUID: "u", Shard: 1, ID: "a"}
		k1 := tpl.Key(e)
		e.ID = "b"
		if k2 := tpl.Key(e); k1 == k2 {
			t.Fatalf("%q gives %q for two ids", s, k1)
		}
	})
}
