package redisx

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/urlx"
)

// Fuzz targets of the stream-entry codec (Values / ParseEvent, the JSON
// line) and of Redis URL parsing (NewClient, Redact, ValidateFeed). Seeds:
// the f.Add calls below and testdata/fuzz/<target>/. Run one with
//
//	go test -run '^$' -fuzz '^FuzzEventValues$' -fuzztime 60s ./redisx/

var fuzzOps = []Op{OpUpsert, OpDelete, OpIndexDeleted, OpSnapshotStart, OpSnapshotEnd}

// fuzzEvent builds a valid event (one the relay or a snapshot can write)
// from fuzzed fields: document fields only on upsert/delete, a JSON source
// only on upserts, counts (valid UTF-8 index names) only on snapshot_end.
func fuzzEvent(op uint8, streamID, index, uuid string, shard int, id, routing string, seq, term, version int64,
	source []byte, target, countsKey string, count int64) Event {
	e := Event{StreamID: streamID, Op: fuzzOps[int(op)%len(fuzzOps)], Index: index, IndexUUID: uuid, Target: target}
	if e.Op.Document() {
		e.Shard, e.ID, e.Routing, e.SeqNo, e.PrimaryTerm, e.Version = shard, id, routing, seq, term, version
	}
	if e.Op == OpUpsert {
		if !json.Valid(source) {
			source, _ = json.Marshal(string(source)) // any bytes, as a JSON string
		}
		e.Source = json.RawMessage(source)
	}
	if e.Op == OpSnapshotEnd {
		e.Counts = map[string]int64{}
		if countsKey != "" {
			e.Counts[strings.ToValidUTF8(countsKey, "?")] = count
		}
	}
	return e
}

// FuzzEventValues: every valid event survives Values → ParseEvent exactly
// (all bytes of every field, Source byte for byte), Values lists each field
// once, op first, all strings; and the JSON line round-trips up to what its
// contract leaves out (stream id, target equal to the index, whitespace
// of the source).
func FuzzEventValues(f *testing.F) {
	f.Add(uint8(0), "1-0", "orders", "BZfHMdwmRv-iskXKFEMGgA", 1, "order-1", "", int64(0), int64(1), int64(1), []byte(`{"a":1}`), "orders", "", int64(0))
	f.Add(uint8(0), "1700000000000-5", "i", "u", 0, "ünïcødé/ id with spaces", "r/1", int64(1<<62), int64(1<<40), int64(1<<62), []byte(`{}`), "logs-*,-logs-debug*", "", int64(0))
	f.Add(uint8(0), "", "i", "u", 2147483647, strings.Repeat("x", 512), strings.Repeat("r", 512), int64(9223372036854775807), int64(9223372036854775807), int64(9223372036854775807), []byte(" {\n \"deep\": [1, 2.5e300, -0, \"\\u0000\"] }\n"), "", "", int64(0))
	f.Add(uint8(0), "2-0", "i", "u", -1, "", "", int64(-1), int64(-9223372036854775808), int64(0), []byte(`null`), "", "", int64(0))
	f.Add(uint8(0), "3-0", "i", "u", 1, "a\x00b\r\n", "\xff\xfe", int64(5), int64(1), int64(1), []byte("not json \xff"), "", "", int64(0))
	f.Add(uint8(1), "4-0", "i", "u", 3, "gone", "customer-3", int64(9), int64(0), int64(0), []byte(nil), "orders", "", int64(0))
	f.Add(uint8(2), "5-0", "logs-2024", "U", 0, "", "", int64(0), int64(0), int64(0), []byte(nil), "logs-*", "", int64(0))
	f.Add(uint8(3), "6-0", "", "", 0, "", "", int64(0), int64(0), int64(0), []byte(nil), "orders,app-*", "", int64(0))
	f.Add(uint8(4), "7-0", "", "", 0, "", "", int64(0), int64(0), int64(0), []byte(nil), "orders", "orders", int64(3))
	f.Add(uint8(4), "8-0", "", "", 0, "", "", int64(0), int64(0), int64(0), []byte(nil), "", "", int64(0))
	f.Fuzz(func(t *testing.T, op uint8, streamID, index, uuid string, shard int, id, routing string, seq, term, version int64,
		source []byte, target, countsKey string, count int64) {
		e := fuzzEvent(op, streamID, index, uuid, shard, id, routing, seq, term, version, source, target, countsKey, count)
		vals := e.Values()
		if len(vals)%2 != 0 || len(vals) < 2 || vals[0] != "op" {
			t.Fatalf("Values of %+v = %q: want field/value pairs starting with op", e, vals)
		}
		seen := map[string]bool{}
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				t.Fatalf("Values item %d is %T, want a string", i, v)
			}
			if i%2 == 0 {
				if seen[s] {
					t.Fatalf("Values lists field %q twice: %q", s, vals)
				}
				seen[s] = true
			}
		}
		got, err := ParseEvent(redis.XMessage{ID: e.StreamID, Values: valuesMap(vals)})
		if err != nil {
			t.Fatalf("ParseEvent(Values(%+v)): %v", e, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("Values → ParseEvent changed the event:\n got %#v\nwant %#v", got, e)
		}

		// The JSON line. Field values that are not UTF-8 cannot be JSON
		// strings (they come from ES's JSON, so they always are).
		for _, s := range []string{e.Index, e.IndexUUID, e.ID, e.Routing, e.Target} {
			if !utf8.ValidString(s) {
				return
			}
		}
		line, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("MarshalJSON(%+v): %v", e, err)
		}
		if !json.Valid(line) || bytes.ContainsAny(line, "\n\r") {
			t.Fatalf("MarshalJSON(%+v) = %q: not one JSON line", e, line)
		}
		var back Event
		if err := json.Unmarshal(line, &back); err != nil {
			t.Fatalf("UnmarshalJSON(%s): %v", line, err)
		}
		want := e
		want.StreamID = ""
		if want.Target == want.Index {
			want.Target = "" // left out of the line by contract
		}
		if len(want.Source) > 0 {
			var c bytes.Buffer
			if err := json.Compact(&c, want.Source); err != nil {
				t.Fatal(err)
			}
			want.Source = c.Bytes()
		}
		if !reflect.DeepEqual(back, want) {
			t.Fatalf("JSON line %s reads back as\n %#v\nwant %#v", line, back, want)
		}
	})
}

// fuzzEntry encodes a field map for the fuzzer: fields separated by \x00,
// name and value by the first \x01.
func fuzzEntry(kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(0)
		}
		b.WriteString(kv[i] + "\x01" + kv[i+1])
	}
	return b.String()
}

func parseFuzzEntry(s string) map[string]any {
	m := map[string]any{}
	if s == "" {
		return m
	}
	for _, f := range strings.Split(s, "\x00") {
		k, v, _ := strings.Cut(f, "\x01")
		m[k] = v
	}
	return m
}

// FuzzParseEntry: on any field map ParseEvent either fails with an error
// wrapping ErrBadEntry, or returns an event that (a) carries the entry's
// text fields exactly, (b) re-encodes with Values to an entry that parses
// to the very same event, and (c) renders as a JSON line. A non-string
// value (never sent by go-redis, but possible in a hand-made XMessage)
// is an ErrBadEntry too.
func FuzzParseEntry(f *testing.F) {
	f.Add("1-0", fuzzEntry("op", "upsert", "index", "i", "index_uuid", "u", "shard", "0", "id", "d", "seq_no", "0", "primary_term", "1", "version", "1", "source", `{"a":1}`))
	f.Add("1-1", fuzzEntry("op", "upsert", "index", "i", "index_uuid", "u", "shard", "0", "id", "d", "seq_no", "0", "source", `{}`, "future_field", "x"))
	f.Add("1-2", fuzzEntry("op", "delete", "index", "i", "index_uuid", "u", "shard", "3", "id", "d", "routing", "r", "seq_no", "9"))
	f.Add("1-3", fuzzEntry("op", "index_deleted", "index", "i", "index_uuid", "u", "target", "i*"))
	f.Add("1-4", fuzzEntry("op", "index_deleted", "index", "i", "index_uuid", "u", "shard", "2", "id", "x", "seq_no", "5"))
	f.Add("1-5", fuzzEntry("op", "snapshot_end", "target", "a,b", "counts", `{"a":1,"b":0}`))
	f.Add("1-6", fuzzEntry("op", "snapshot_end", "counts", `null`))
	f.Add("1-7", fuzzEntry("op", "snapshot_start"))
	f.Add("1-8", fuzzEntry("op", "upsert", "index", "i", "index_uuid", "u", "shard", "+1", "id", "d", "seq_no", "-0", "source", ` [ ] `))
	f.Add("1-9", fuzzEntry("op", "upsert", "index", "i", "index_uuid", "u", "shard", "0", "id", "d", "seq_no", "99999999999999999999", "source", `{}`))
	f.Add("1-10", fuzzEntry("op", "upsert", "index", "i", "index_uuid", "u", "shard", "0", "id", "d", "seq_no", "1", "source", ""))
	f.Add("", "")
	f.Add("x", "\x00\x01\x00")
	f.Fuzz(func(t *testing.T, id, entry string) {
		m := parseFuzzEntry(entry)
		if strings.HasPrefix(id, "int:") { // a non-string value, as a hand-made XMessage may hold
			m["op"] = 7
		}
		e, err := ParseEvent(redis.XMessage{ID: id, Values: m})
		if err != nil {
			if !errors.Is(err, ErrBadEntry) {
				t.Fatalf("ParseEvent(%q): error %v does not wrap ErrBadEntry", m, err)
			}
			return
		}
		if e.StreamID != id || !e.Op.valid() {
			t.Fatalf("ParseEvent(%q) = %+v: stream id or op wrong", m, e)
		}
		for name, got := range map[string]string{"op": string(e.Op), "index": e.Index, "index_uuid": e.IndexUUID, "target": e.Target} {
			if want, _ := m[name].(string); got != want {
				t.Fatalf("ParseEvent(%q): %s = %q, want %q", m, name, got, want)
			}
		}
		if e.Op.Document() {
			for name, got := range map[string]string{"id": e.ID, "routing": e.Routing} {
				if want, _ := m[name].(string); got != want {
					t.Fatalf("ParseEvent(%q): %s = %q, want %q", m, name, got, want)
				}
			}
		}
		if src, _ := m["source"].(string); src != string(e.Source) {
			t.Fatalf("ParseEvent(%q): source %q, want %q byte for byte", m, e.Source, src)
		}
		again, err := ParseEvent(redis.XMessage{ID: id, Values: valuesMap(e.Values())})
		if err != nil {
			t.Fatalf("re-parse of %+v (from %q): %v", e, m, err)
		}
		if !reflect.DeepEqual(again, e) {
			t.Fatalf("entry %q parses to\n %#v\nbut its Values re-parse to\n %#v", m, e, again)
		}
		if _, err := json.Marshal(e); err != nil {
			t.Fatalf("a parsed event does not render as JSON: %+v: %v", e, err)
		}
	})
}

// FuzzEventJSON: any JSON line UnmarshalJSON accepts renders back
// (MarshalJSON) as valid JSON that is a fixed point of read → write.
func FuzzEventJSON(f *testing.F) {
	f.Add([]byte(`{"op":"upsert","index":"escf-cli","index_uuid":"BZfHMdwmRv-iskXKFEMGgA","shard":1,"id":"1","seq_no":2,"primary_term":1,"version":2,"source":{"title": "edited"}}`))
	f.Add([]byte(`{"op":"delete","index":"i","index_uuid":"u","shard":1,"id":"2","routing":"c-1","seq_no":7}`))
	f.Add([]byte(`{"op":"snapshot_end","target":"orders,app-*","counts":{"app-1":0,"orders":3}}`))
	f.Add([]byte(`{"op":"index_deleted","index":"i","index_uuid":"U","target":"i"}`))
	f.Add([]byte(`{"op":"upsert","id":"\ud83d\ude00 / \u00e9","source":null,"counts":null}`))
	f.Add([]byte(`{"op":"bogus","shard":-1,"seq_no":-9223372036854775808,"source":[1,"\u2028"]}`))
	f.Add([]byte(`{"OP":"upsert","Id":"case","id":"last wins","id":"really"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var e Event
		if json.Unmarshal(data, &e) != nil {
			return
		}
		line, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("MarshalJSON of %+v (read from %s): %v", e, data, err)
		}
		if !json.Valid(line) {
			t.Fatalf("MarshalJSON = %q: not JSON", line)
		}
		var back Event
		if err := json.Unmarshal(line, &back); err != nil {
			t.Fatalf("UnmarshalJSON(%s): %v", line, err)
		}
		again, err := json.Marshal(back)
		if err != nil || !bytes.Equal(again, line) {
			t.Fatalf("not a fixed point: %s → %s (%v)", line, again, err)
		}
	})
}

// FuzzNewClient: NewClient never panics; a refusal wraps ErrBadURL; an
// accepted URL is still accepted, as the same server, database, user and
// TLS setting, in its redacted form (what logs show can be pasted back);
// Redact keeps a URL's shape and replaces its password (if it has one)
// by xxxxx; a redacted URL stays masked when redacted again.
func FuzzNewClient(f *testing.F) {
	for _, s := range []string{
		"redis://localhost:6379/0", "rediss://user:secret@cache.example.com:6380/2", "redis://:p%40ss@h/",
		"redis://[::1]:6379", "redis://h:6379/0?dial_timeout=3s&protocol=3", "redis://h/0/1", "redis://h/x",
		"redis://user:sec ret@host/0", "redis://user:p@ss@host:6379/0", "redis://u:12/x@host", "unix:///tmp/redis.sock",
		"http://h:6379", "localhost:6379", "redis://", "redis:///0", "", "redis://h:99999999999/0", "redis://h?db=1&db=2",
		"redis://üñí.example:6379/0", "redis://h/%zz",
		"redis-sentinel://u:pw@s1:26379,s2:26379/mymaster/1", "rediss-sentinel://s1:26379/m", "redis-sentinel://s1:26379", "redis-sentinel://s1/m/x/y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		red := Redact(raw)
		if u, err := url.Parse(raw); err == nil && u.User != nil && urlx.StrayAt(u) {
			// An '@' after the host: the password may hold a '/', '?' or
			// '#' that ended the host early, so Redact masks everything
			// up to the last '@' rather than trust url.Parse's reading.
			if at := strings.LastIndex(raw, "@"); !strings.HasSuffix(red, urlx.Mask+raw[at:]) {
				t.Fatalf("Redact(%q) = %q: want everything before the last '@' after the user name masked", raw, red)
			}
		} else if err == nil && u.User != nil {
			if _, has := u.User.Password(); has {
				r, err := url.Parse(red)
				if err != nil {
					t.Fatalf("Redact(%q) = %q: not a URL any more: %v", raw, red, err)
				}
				p, _ := r.User.Password()
				if r.Scheme != u.Scheme || r.Host != u.Host || r.Path != u.Path || r.User.Username() != u.User.Username() || p != "xxxxx" {
					t.Fatalf("Redact(%q) = %q: want the same URL with password xxxxx", raw, red)
				}
			}
		}
		if strings.Contains(red, "xxxxx") && !strings.Contains(Redact(red), "xxxxx") {
			t.Fatalf("Redact(%q) = %q, redacted again %q: the mask is gone", raw, red, Redact(red))
		}
		c, err := NewClient(raw)
		if err != nil {
			if !errors.Is(err, ErrBadURL) {
				t.Fatalf("NewClient(%q): error %v does not wrap ErrBadURL", raw, err)
			}
			return
		}
		defer c.Close()
		opt := c.(*redis.Client).Options()
		c2, err := NewClient(red)
		if err != nil {
			t.Fatalf("NewClient(%q) accepted, its redacted form %q refused: %v", raw, red, err)
		}
		defer c2.Close()
		opt2 := c2.(*redis.Client).Options()
		if opt.Addr != opt2.Addr || opt.DB != opt2.DB || opt.Username != opt2.Username || (opt.TLSConfig == nil) != (opt2.TLSConfig == nil) {
			t.Fatalf("%q and its redacted form %q differ: addr %q/%q db %d/%d user %q/%q", raw, red, opt.Addr, opt2.Addr, opt.DB, opt2.DB, opt.Username, opt2.Username)
		}
		if u, _ := url.Parse(raw); (u.Scheme == "rediss" || u.Scheme == "rediss-sentinel") != (opt.TLSConfig != nil) {
			t.Fatalf("%q: TLS %v", raw, opt.TLSConfig != nil)
		}
	})
}

// redisURLTexts is the fixed text of NewClient's and go-redis's URL
// errors: a password that is a substring of it proves nothing.
const redisURLTexts = `bad Redis URL: no scheme (want redis://host:port/db or rediss://…) scheme is not supported (want redis:// or rediss://) no host ` +
	`redis: invalid database number: redis: invalid URL path: redis: unexpected option: invalid URL escape invalid port after host ` +
	`invalid character in host name net/url: invalid userinfo invalid control character in URL missing protocol scheme first path segment in URL cannot contain colon xxxxx ` +
	`(want redis://, rediss://, redis-sentinel://, rediss-sentinel://, redis-cluster:// or rediss-cluster://) cluster node address want host:port (several: host1:6379,host2:6379) ` +
	`a Redis Cluster has only database 0 (drop the path, or write /0) a Redis Cluster URL takes no options after '?' ` +
	`a Sentinel master is set, but redis-cluster:// is a Redis Cluster (it fails over by itself): drop the Sentinel master ` +
	`(want redis://, rediss://, redis-sentinel:// or rediss-sentinel://) sentinel address want host:port (several: host1:26379,host2:26379) ` +
	`no master name (want redis-sentinel://host:26379/<master>[/db]) database is not a number path want /<master>[/db] a Sentinel URL takes no options after '?'`

// FuzzRedact: in a URL prefix + user + ":" + password + "@" + rest, the
// password never appears in Redact's output, nor in any error NewClient
// returns, however the URL around it is broken (no scheme, spaces, '@',
// '/', '%' in the password, a bad port, a bad database).
func FuzzRedact(f *testing.F) {
	f.Add("redis://", "user", "s3cr3t-pw", "localhost:6379/0")
	f.Add("rediss://", "", "s3cr3t-pw", "cache:6380")
	f.Add("redis://", "user", "p@ssw0rd", "host:6379/0")
	f.Add("redis://", "user", "@leading-at", "host:6379/0")
	f.Add("redis://", "user", "with space", "host/0")
	f.Add("redis://", "user", "Abc/Def+ghi==", "host:6379/0")
	f.Add("redis://", "user", "1234/5678", "host/0")
	f.Add("redis://", "user", "bad%zzescape", "host/0")
	f.Add("redis://", "user", "s3cr3t-pw", "host:port/0")
	f.Add("redis://", "user", "s3cr3t-pw", "host/notadb")
	f.Add("http://", "user", "s3cr3t-pw", "host")
	f.Add("://", "user", "s3cr3t-pw", "host")
	f.Add("", "user", "s3cr3t-pw", "host:6379")
	f.Add("redis:", "user", "s3cr3t-pw", "host:6379")
	f.Add("redis://", "u:x", "s3cr3t-pw", "h#frag")
	f.Add("redis-cluster://", "user", "s3cr3t-pw", "h1:7000,h2:7000/1")
	f.Add("rediss-cluster://", "user", "s3cr3t-pw", "h1:7000,h2?x=1")
	f.Fuzz(func(t *testing.T, prefix, user, pass, rest string) {
		raw := prefix + user + ":" + pass + "@" + rest
		around := prefix + user + ":" + "@" + rest
		around += strconv.Quote(around) // what %q makes of it: "\x00" + "00" has "0000"
		leak := func(where, s string) {
			for _, p := range []string{pass, url.PathEscape(pass), url.QueryEscape(pass)} {
				if len(p) >= 4 && !strings.Contains(around, p) && !strings.Contains(redisURLTexts, p) && strings.Contains(s, p) {
					t.Fatalf("password %q of %q shows in %s: %s", pass, raw, where, s)
				}
			}
			if dec, err := url.PathUnescape(pass); err == nil && dec != pass {
				if len(dec) >= 4 && !strings.Contains(around, dec) && !strings.Contains(redisURLTexts, dec) && strings.Contains(s, dec) {
					t.Fatalf("password %q (%q) of %q shows in %s: %s", pass, dec, raw, where, s)
				}
			}
		}
		leak("Redact", Redact(raw))
		c, err := NewClient(raw)
		if err != nil {
			leak("the error", err.Error())
			return
		}
		c.Close()
	})
}

// FuzzValidateFeed: an accepted feed name gives keys that all carry the
// hash tag {feed} as their first tag (one Redis Cluster slot, so one
// MULTI/EXEC may span them), and a SCAN pattern (Pattern, used by
// checkpoint.Store.Reset to delete a feed's state) that matches every key
// of the feed and no key of another feed, whatever glob characters the
// names hold.
func FuzzValidateFeed(f *testing.F) {
	for _, s := range [][2]string{{"default", "orders"}, {"a", "b"}, {strings.Repeat("f", 100), "f"}, {strings.Repeat("f", 101), "f"},
		{"a{b", "a"}, {"a}b", "a"}, {"a:b", "a"}, {"a b", "a"}, {"ünïcødé", "ünï"}, {"*", "orders"}, {"order?", "orders"},
		{"a*", "ab"}, {"[ab]", "a"}, {"[^x]", "y"}, {"a\\b", "a\\b2"}, {"\\", "\\x"}, {"\x00", "\x01"}, {"-", "--"}, {"", "a"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, feed, other string) {
		if err := ValidateFeed(feed); err != nil {
			if !strings.Contains(err.Error(), "feed name") {
				t.Fatalf("ValidateFeed(%q): %v does not say what is wrong", feed, err)
			}
			return
		}
		if feed == "" || len(feed) > 100 || strings.ContainsAny(feed, "{}:") {
			t.Fatalf("ValidateFeed accepted %q", feed)
		}
		k := NewKeys(feed)
		if k.Feed() != feed {
			t.Fatalf("Feed() = %q, want %q", k.Feed(), feed)
		}
		keysOf := func(k Keys) []string {
			return []string{k.Events(), k.Checkpoints(), k.Indices(), k.Delivered("u{x}", 1), k.Routing("u", 2), k.Scan("u", 3),
				k.Meta(), k.Generations(), k.Fence("f"), k.Lease(), k.Dead()}
		}
		for _, key := range keysOf(k) {
			i := strings.IndexByte(key, '{')
			j := strings.IndexByte(key[i+1:], '}')
			if i < 0 || j <= 0 || key[i+1:i+1+j] != feed {
				t.Fatalf("key %q of feed %q does not carry the hash tag {%s}", key, feed, feed)
			}
			if !redisGlobMatch(k.Pattern(), key) {
				t.Fatalf("Pattern() %q of feed %q does not match its key %q", k.Pattern(), feed, key)
			}
		}
		if other == feed || ValidateFeed(other) != nil {
			return
		}
		for _, key := range keysOf(NewKeys(other)) {
			if redisGlobMatch(k.Pattern(), key) {
				t.Fatalf("Pattern() %q of feed %q matches %q of feed %q: Reset would delete another feed's keys", k.Pattern(), feed, key, other)
			}
		}
	})
}

// redisGlobMatch is Redis's stringmatchlen (util.c), case-sensitive: the
// matcher of SCAN MATCH and KEYS.
func redisGlobMatch(pattern, s string) bool {
	skip := false
	return globMatch(pattern, s, &skip, 0)
}

func globMatch(p, s string, skipLonger *bool, nesting int) bool {
	if nesting > 1000 {
		return false
	}
	for len(p) > 0 && len(s) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for len(s) > 0 {
				if globMatch(p[1:], s, skipLonger, nesting+1) {
					return true
				}
				if *skipLonger {
					return false
				}
				s = s[1:]
			}
			*skipLonger = true
			return false
		case '?':
			s = s[1:]
		case '[':
			p = p[1:]
			not := len(p) > 0 && p[0] == '^'
			if not {
				p = p[1:]
			}
			match := false
			for {
				if len(p) >= 2 && p[0] == '\\' {
					p = p[1:]
					if p[0] == s[0] {
						match = true
					}
				} else if len(p) > 0 && p[0] == ']' {
					break
				} else if len(p) == 0 {
					p = "]" // Redis steps back onto the last byte: the class took the rest of the pattern
					break
				} else if len(p) >= 3 && p[1] == '-' {
					lo, hi := p[0], p[2]
					if lo > hi {
						lo, hi = hi, lo
					}
					p = p[2:]
					if s[0] >= lo && s[0] <= hi {
						match = true
					}
				} else if p[0] == s[0] {
					match = true
				}
				p = p[1:]
			}
			if not {
				match = !match
			}
			if !match {
				return false
			}
			s = s[1:]
		case '\\':
			if len(p) >= 2 {
				p = p[1:]
			}
			fallthrough
		default:
			if p[0] != s[0] {
				return false
			}
			s = s[1:]
		}
		p = p[1:]
		if len(s) == 0 {
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			break
		}
	}
	return len(p) == 0 && len(s) == 0
}
