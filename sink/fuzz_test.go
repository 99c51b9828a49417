package sink

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// Fuzz targets of the sinks' configuration parsers, besides
// FuzzParseKeyTemplate (template_test.go): keys made from fuzzed event
// values, the bulk sink's IndexTemplate, the HTTP sink's URL, the postgres
// sink's table names. Run one with
//
//	go test -run '^$' -fuzz '^FuzzKeyTemplateKey$' -fuzztime 60s ./sink/

// FuzzKeyTemplateKey: for any accepted template and any event values
// (braces, colons, unicode, empty), two documents that differ only by id
// get different keys, and a fixed hash tag is the hash tag of every key.
func FuzzKeyTemplateKey(f *testing.F) {
	f.Add(DefaultRedisKey, "orders", "BZfHMdwmRv-iskXKFEMGgA", 1, "42", "", "43")
	f.Add("cache:{{c}}:{index}:{id}", "{i}", "u}", 0, "{x}", "{", "{y}")
	f.Add("{{}}{id}", "", "", -1, "a", "b", "ab")
	f.Add("{id}{id}", "i", "u", 2, "a", "", "aa")
	f.Add("{routing}{id}", "i", "u", 2, "", "a", "b")
	f.Add("{{a}}{{b}}{id}", "i", "u", 2, "ünïcødé/ id", "r", strings.Repeat("x", 512))
	f.Add("x{{{id}}}", "i", "u", 2147483647, "}", "{", "{}")
	f.Fuzz(func(t *testing.T, tmpl, index, uuid string, shard int, id, routing, otherID string) {
		tpl, err := ParseKeyTemplate(tmpl)
		if err != nil {
			return
		}
		e := redisx.Event{Op: redisx.OpUpsert, Index: index, IndexUUID: uuid, Shard: shard, ID: id, Routing: routing}
		k1 := tpl.Key(e)
		if otherID != id {
			e2 := e
			e2.ID = otherID
			if k2 := tpl.Key(e2); k1 == k2 {
				t.Fatalf("%q gives ids %q and %q the same key %q", tmpl, id, otherID, k1)
			}
		}
	})
}

// validESIndexName is Elasticsearch's rule for an index name
// (MetadataCreateIndexService.validateIndexOrAliasName), but for the 255
// bytes limit, which depends on the source names.
func validESIndexName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "\\/*?\"<>| ,#:") &&
		!strings.ContainsAny(s[:1], "-_+") && strings.ToLower(s) == s
}

// FuzzParseBulkTemplate: an IndexTemplate the bulk sink accepts makes a
// valid Elasticsearch index name of every valid source index name and
// index uuid, so a config error is reported at start, not as a permanent
// failure of every event.
func FuzzParseBulkTemplate(f *testing.F) {
	for _, s := range []string{"{index}", "{index}-mirror", "mirror-{index}-{index_uuid}", "copy.{index}", "{index_uuid}", "{index}{", "}{index}",
		"{nope}", "-{index}", "_x", "+x", "Mirror-{index}", "a b", "{index}#1", "", "x", ".", "..", ".{index}", "Été-{index}", "{index}-Ω", "{index}:x", "{}"} {
		f.Add(s, "orders", "BZfHMdwmRv-iskXKFEMGgA")
	}
	f.Add("{index}", ".kibana", "_-aZ09")
	f.Fuzz(func(t *testing.T, tmpl, index, uuid string) {
		tp, err := parseBulkTemplate(tmpl)
		if err != nil {
			if !strings.Contains(err.Error(), "IndexTemplate") {
				t.Fatalf("parseBulkTemplate(%q): %v does not name the field", tmpl, err)
			}
			return
		}
		if !validESIndexName(index) {
			index = "orders"
		}
		// A uuid is 22 characters of URL-safe base64.
		uuid = strings.Map(func(r rune) rune {
			if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' {
				return r
			}
			return 'x'
		}, uuid)
		e := redisx.Event{Op: redisx.OpUpsert, Index: index, IndexUUID: uuid}
		if name := tp.expand(e); !validESIndexName(name) {
			t.Fatalf("IndexTemplate %q accepted, but index %q (uuid %q) maps to %q, which Elasticsearch refuses", tmpl, index, uuid, name)
		}
	})
}

// FuzzHTTPConfigValidate: HTTPConfig.Validate never panics, accepts only
// http(s) URLs with a host, and never shows the password of a URL
// prefix + user + ":" + password + "@" + rest in its error, nor NewHTTP
// in the URL its errors name.
func FuzzHTTPConfigValidate(f *testing.F) {
	f.Add("https://", "user", "s3cr3t-pw", "hooks.example.com/feed")
	f.Add("http://", "user", "with space", "h")
	f.Add("http://", "user", "Abc/Def+ghi==", "h:8080/x")
	f.Add("http://", "user", "bad%zzescape", "h")
	f.Add("http://", "user", "s3cr3t-pw", "h:port")
	f.Add("ftp://", "user", "s3cr3t-pw", "h")
	f.Add("", "user", "s3cr3t-pw", "h")
	f.Add("://", "user", "@leading-at", "h")
	f.Fuzz(func(t *testing.T, prefix, user, pass, rest string) {
		raw := prefix + user + ":" + pass + "@" + rest
		around := prefix + user + ":" + "@" + rest
		around += strconv.Quote(around) // what %q makes of it: "\x00" + "00" has "0000"
		err := HTTPConfig{URL: raw}.Validate()
		if err == nil {
			u, _ := url.Parse(raw)
			if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				t.Fatalf("Validate accepted %q", raw)
			}
			s, err := NewHTTP(HTTPConfig{URL: raw})
			if err != nil {
				t.Fatalf("Validate accepted %q, NewHTTP refused it: %v", raw, err)
			}
			defer s.Close(context.Background())
			if len(pass) >= 4 && !strings.Contains(around, pass) && strings.Contains(s.url, pass) {
				t.Fatalf("password %q of %q shows in the URL the sink reports: %s", pass, raw, s.url)
			}
			return
		}
		const texts = `http sink config: URL: scheme want http or https has no host invalid URL escape invalid port after host ` +
			`invalid character in host name net/url: invalid userinfo invalid control character in URL missing protocol scheme ` +
			`first path segment in URL cannot contain colon xxxxx`
		cands := []string{pass, url.PathEscape(pass), url.QueryEscape(pass)}
		if dec, err := url.PathUnescape(pass); err == nil {
			cands = append(cands, dec)
		}
		for _, p := range cands {
			if len(p) >= 4 && !strings.Contains(around, p) && !strings.Contains(texts, p) && strings.Contains(err.Error(), p) {
				t.Fatalf("password %q of %q shows in the error: %v", pass, raw, err)
			}
		}
	})
}

// FuzzPostgresTableName: for any accepted table template and any index
// name and uuid, the table is a name PostgreSQL keeps as it is (at most
// PostgresMaxName bytes of valid UTF-8: letters, digits and '_'), the same
// every time, and two index names that differ get different tables when
// either is cut (the hash of the whole name ends it).
func FuzzPostgresTableName(f *testing.F) {
	for _, s := range []string{"escf_{index}", "{index}", "t_{index}_{index_uuid}", "{index_uuid}", "x", "{nope}", "{index", "}", ""} {
		f.Add(s, "orders", "BZfHMdwmRv-iskXKFEMGgA")
	}
	f.Add("escf_{index}", strings.Repeat("logs-2024.01-", 6), "u")
	f.Add("{index}", strings.Repeat("é", 40), "u")
	f.Add("{index}", "a\xffb", "u")
	f.Fuzz(func(t *testing.T, tmpl, index, uuid string) {
		tp, err := parsePgTemplate(tmpl)
		if err != nil {
			if !strings.Contains(err.Error(), "Table") {
				t.Fatalf("parsePgTemplate(%q): %v does not name the field", tmpl, err)
			}
			return
		}
		name := tp.expand(index, uuid)
		if len(name) > PostgresMaxName || !utf8.ValidString(name) {
			t.Fatalf("template %q, index %q: table %q (%d bytes) is not a name PostgreSQL keeps as it is", tmpl, index, name, len(name))
		}
		for _, r := range name {
			if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' {
				t.Fatalf("template %q, index %q: table %q holds %q", tmpl, index, name, r)
			}
		}
		if again := tp.expand(index, uuid); again != name {
			t.Fatalf("template %q, index %q: table %q, then %q", tmpl, index, name, again)
		}
		if other := tp.expand(index+"x", uuid); tp.names("index") && other == name && len(name) == PostgresMaxName {
			t.Fatalf("template %q: indices %q and %q share the cut table %q", tmpl, index, index+"x", name)
		}
	})
}
