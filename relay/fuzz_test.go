package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// Fuzz targets of the relay's parsers: a search hit, as the cluster
// returns it in hits.hits[], to the stream entry the relay writes
// (FuzzHitToEvent); the --index values (FuzzSplitTargets); stream ids
// (FuzzStreamID). Run one with
//
//	go test -run '^$' -fuzz '^FuzzHitToEvent$' -fuzztime 60s ./relay/

// hitBodyKey carries the search answer a hitTransport gives to a request.
type hitBodyKey struct{}

// hitTransport answers every request with the body in its context.
type hitTransport struct{}

func (hitTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	body, _ := r.Context().Value(hitBodyKey{}).([]byte)
	return &http.Response{StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)), Request: r}, nil
}

var (
	hitClientOnce sync.Once
	hitClient     *es.Client
	hitClientErr  error
)

// searchOneHit runs es.Client.SearchShard on an answer holding hit as its
// only hits.hits[] element, for shard 3 of index "i".
func searchOneHit(tb testing.TB, hit []byte, after, upTo int64) ([]es.Hit, error) {
	tb.Helper()
	hitClientOnce.Do(func() {
		hitClient, hitClientErr = es.New(es.Config{URLs: []string{"http://fuzz.invalid:9200"}, Transport: hitTransport{}})
	})
	if hitClientErr != nil {
		tb.Fatal(hitClientErr)
	}
	body := make([]byte, 0, len(hit)+200)
	body = append(body, `{"took":1,"timed_out":false,"_shards":{"total":1,"successful":1,"skipped":0,"failed":0},"hits":{"hits":[`...)
	body = append(body, hit...)
	body = append(body, `]}}`...)
	ctx := context.WithValue(context.Background(), hitBodyKey{}, body)
	return hitClient.SearchShard(ctx, es.ShardPage{Index: "i", Shard: 3, After: after, UpTo: upTo, Size: 1})
}

// esHit is what a hit says, read independently of package es: the last
// value of each field (keys match case-insensitively, as encoding/json
// does), a null string leaving the field as it was, a null number unset.
type esHit struct {
	index, id, routing string
	seqNo, term, ver   *int64
	source             json.RawMessage
}

var esHitFields = []string{"_index", "_id", "_routing", "_seq_no", "_primary_term", "_version", "_source"}

// readHit reads one JSON value as a hit; ok is false if a field has the
// wrong type (a string that is not one, a number that is not an int64) or
// the value is not an object (or null).
func readHit(data []byte) (h esHit, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return h, false
	}
	if tok == nil {
		return h, true // null: a hit with nothing
	}
	if d, isDelim := tok.(json.Delim); !isDelim || d != '{' {
		return h, false
	}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return h, false
		}
		key, _ := kt.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return h, false
		}
		field := ""
		for _, f := range esHitFields {
			if strings.EqualFold(key, f) {
				field = f
				break
			}
		}
		isNull := string(raw) == "null"
		switch field {
		case "_index", "_id", "_routing":
			if isNull {
				continue
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return h, false
			}
			switch field {
			case "_index":
				h.index = s
			case "_id":
				h.id = s
			default:
				h.routing = s
			}
		case "_seq_no", "_primary_term", "_version":
			var p *int64
			if !isNull {
				n, err := strconv.ParseInt(string(raw), 10, 64)
				if err != nil {
					return h, false
				}
				p = &n
			}
			switch field {
			case "_seq_no":
				h.seqNo = p
			case "_primary_term":
				h.term = p
			default:
				h.ver = p
			}
		case "_source":
			h.source = append(json.RawMessage(nil), raw...)
		}
	}
	return h, true
}

// FuzzHitToEvent: for any hit JSON, the relay's mapping (SearchShard's
// decoding, then upsertEvent) either refuses it with an ErrMalformed
// error naming the hit, or yields an upsert whose fields are the hit's
// exactly: _id, _routing, _seq_no, _primary_term, _version, and _source
// byte for byte. A hit without _seq_no, _primary_term, _version, _id or
// _source (or with null ones), from another index, or with a _seq_no
// outside (After, UpTo] is refused, never read as a zero. The event then
// survives the stream entry (Values → ParseEvent) and the JSON line.
func FuzzHitToEvent(f *testing.F) {
	for _, h := range []string{
		`{"_index":"i","_id":"a","_version":1,"_seq_no":5,"_primary_term":1,"_score":null,"_source":{"a":1},"sort":[5]}`,
		`{"_index":"i","_id":"order-1","_routing":"customer-3","_version":7,"_seq_no":0,"_primary_term":3,"_source":{}}`,
		`{"_index":"i","_id":"ünïcødé/ id with spaces\u2028\u0000","_version":1,"_seq_no":6,"_primary_term":1,"_source":{"é":"\ud83d\ude00"}}`,
		`{"_index":"i","_id":"` + strings.Repeat("x", 512) + `","_version":1,"_seq_no":6,"_primary_term":1,"_source":{"k":"` + strings.Repeat("v", 512) + `"}}`,
		`{"_index":"i","_id":"a","_version":1,"_seq_no":9223372036854775807,"_primary_term":9223372036854775807,"_source":{"n":1e400}}`,
		`{"_index":"i","_id":"a","_version":1,"_seq_no":18446744073709551616,"_primary_term":1,"_source":{}}`,
		`{"_index":"i","_id":"a","_version":1,"_seq_no":-2,"_primary_term":1,"_source":{}}`,
		`{"_index":"i","_id":"a","_version":1,"_seq_no":5.0,"_primary_term":1,"_source":{}}`,
		`{"_index":"i","_id":"a","_version":1,"_seq_no":"5","_primary_term":1,"_source":{}}`,
		`{"_index":"i","_id":"a","_version":1,"_primary_term":1,"_source":{}}`,
		`{"_index":"i","_id":"a","_version":1,"_seq_no":5,"_source":{}}`,
		`{"_index":"i","_id":"a","_version":1,"_seq_no":null,"_primary_term":1,"_source":{}}`,
		`{"_index":"i","_id":"a","_seq_no":5,"_primary_term":1,"_source":{}}`,
		`{"_index":"i","_version":1,"_seq_no":5,"_primary_term":1,"_source":{}}`,
		`{"_index":"i","_id":"","_version":1,"_seq_no":5,"_primary_term":1,"_source":{}}`,
		`{"_index":"i","_id":"a","_version":1,"_seq_no":5,"_primary_term":1}`,
		`{"_index":"i","_id":"a","_version":1,"_seq_no":5,"_primary_term":1,"_source":null}`,
		`{"_index":"j","_id":"a","_version":1,"_seq_no":5,"_primary_term":1,"_source":{}}`,
		`{"_index":"i","_id":"a","_id":null,"_ID":"b","_version":1,"_seq_no":5,"_SEQ_NO":6,"_primary_term":1,"_source":{"x":1},"_Source":[1, 2 ,3]}`,
		`{"_index":"i","_id":"a","_version":1,"_seq_no":5,"_primary_term":1,"_source":  {  "spaced" : [ 1 , 2 ] , "t" : true  }  }`,
		`{"_index":"i","_id":"a","_version":1,"_seq_no":5,"_primary_term":1,"_source":"not an object"}`,
		`{"_index":"i","_id":"a\xff","_version":1,"_seq_no":5,"_primary_term":1,"_source":{"b":"\xfe"}}`,
		`null`, `[]`, `5`, `{}`,
		`{"_index":"i","_id":"a","_version":1,"_seq_no":5,"_primary_term":1,"_source":{}}]},"hits":{"hits":[`,
	} {
		f.Add([]byte(h), int64(4), int64(9))
	}
	f.Add([]byte(`{"_index":"i","_id":"a","_version":1,"_seq_no":0,"_primary_term":1,"_source":{}}`), int64(-1), int64(0))
	f.Add([]byte(`{"_index":"i","_id":"a","_version":1,"_seq_no":4,"_primary_term":1,"_source":{}}`), int64(4), int64(9))
	f.Add([]byte(`{"_index":"i","_id":"a","_version":1,"_seq_no":10,"_primary_term":1,"_source":{}}`), int64(4), int64(9))
	f.Add([]byte(`{"_index":"i","_id":"a","_version":1,"_seq_no":-9223372036854775808,"_primary_term":1,"_source":{}}`), int64(math.MinInt64), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, hit []byte, after, upTo int64) {
		hits, err := searchOneHit(t, hit, after, upTo)
		if json.Valid(hit) {
			want, decodes := readHit(hit)
			accept := decodes && want.index == "i" && want.seqNo != nil && want.term != nil && want.ver != nil &&
				*want.seqNo > after && *want.seqNo <= upTo && want.id != "" && len(want.source) > 0 && string(want.source) != "null"
			switch {
			case accept && err != nil:
				t.Fatalf("hit %s (after %d, up to %d) refused: %v", hit, after, upTo, err)
			case !accept && err == nil:
				t.Fatalf("hit %s (after %d, up to %d) accepted as %+v; want an error", hit, after, upTo, hits)
			case accept:
				if len(hits) != 1 {
					t.Fatalf("hit %s gave %d hits", hit, len(hits))
				}
				got := hits[0]
				if got.ID != want.id || got.Routing != want.routing || got.SeqNo != *want.seqNo || got.PrimaryTerm != *want.term ||
					got.Version != *want.ver || !bytes.Equal(got.Source, want.source) {
					t.Fatalf("hit %s read as %+v (source %q); want id %q routing %q seq_no %d primary_term %d version %d source %q",
						hit, got, got.Source, want.id, want.routing, *want.seqNo, *want.term, *want.ver, want.source)
				}
			}
		}
		if err != nil {
			if !errors.Is(err, es.ErrMalformed) || hits != nil {
				t.Fatalf("hit %s: error %v (with %d hits): want ErrMalformed and no hits", hit, err, len(hits))
			}
			if msg := err.Error(); !strings.Contains(msg, "hit 0") && !strings.Contains(msg, "undecodable body") && !strings.Contains(msg, "hits for size") {
				t.Fatalf("hit %s: error %q does not say what is wrong", hit, msg)
			}
			return
		}

		for _, h := range hits {
			e := upsertEvent("i", "BZfHMdwmRv-iskXKFEMGgA", 3, "i*", h)
			want := redisx.Event{Op: redisx.OpUpsert, Index: "i", IndexUUID: "BZfHMdwmRv-iskXKFEMGgA", Shard: 3, ID: h.ID, Routing: h.Routing,
				SeqNo: h.SeqNo, PrimaryTerm: h.PrimaryTerm, Version: h.Version, Source: h.Source, Target: "i*"}
			if !reflect.DeepEqual(e, want) {
				t.Fatalf("upsertEvent(%+v) = %+v", h, e)
			}
			// The stream entry.
			vals := e.Values()
			m := make(map[string]any, len(vals)/2)
			for i := 0; i+1 < len(vals); i += 2 {
				m[vals[i].(string)] = vals[i+1]
			}
			back, err := redisx.ParseEvent(redis.XMessage{ID: "1700000000000-0", Values: m})
			if err != nil {
				t.Fatalf("the entry of hit %s does not parse: %v", hit, err)
			}
			want.StreamID = "1700000000000-0"
			if !reflect.DeepEqual(back, want) {
				t.Fatalf("hit %s: the stream entry reads back as\n %#v\nwant %#v", hit, back, want)
			}
			// The JSON line (source compacted, stream id left out).
			line, err := json.Marshal(e)
			if err != nil {
				t.Fatalf("the event of hit %s does not render: %v", hit, err)
			}
			var fromLine redisx.Event
			if err := json.Unmarshal(line, &fromLine); err != nil {
				t.Fatalf("line %s: %v", line, err)
			}
			var c bytes.Buffer
			_ = json.Compact(&c, h.Source)
			want.StreamID, want.Source = "", c.Bytes()
			if !reflect.DeepEqual(fromLine, want) {
				t.Fatalf("hit %s: the JSON line %s reads back as\n %#v\nwant %#v", hit, line, fromLine, want)
			}
		}
	})
}

// FuzzSplitTargets: SplitTargets keeps every non-empty element of the
// --index values, trimmed, in order, and nothing else; never joins two
// values; gives no empty expression; and keeps each exclusion ('-…') with
// the elements before it in its value (empty elements in between do not
// count), so an expression starts with '-' only when its value does. It
// is idempotent.
func FuzzSplitTargets(f *testing.F) {
	for _, s := range [][3]string{
		{"orders", "", ""}, {"logs-*,-logs-debug*,metrics", "orders", ""}, {"a,b", "c", ""},
		{"logs-*,,-logs-debug*", "", ""}, {"logs-*, ,-logs-debug*", "", ""}, {"logs-*,\t-logs-debug*", "", ""},
		{"-x,a", "", ""}, {"-", ",", ",,"}, {"a,-b", "-c", "d"}, {" ", "\t,\n", ""}, {"ünï-*,-ünï-x", "", ""},
		{"a,-b,-c,d,-e", "", ""}, {"a ,- b", "", ""}, {"", "", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, a, b, c string) {
		values := []string{a, b, c}
		out := SplitTargets(values)
		var perValue []string
		for _, v := range values {
			one := SplitTargets([]string{v})
			perValue = append(perValue, one...)
			var wantParts, gotParts []string
			for _, p := range strings.Split(v, ",") {
				if p = strings.TrimSpace(p); p != "" {
					wantParts = append(wantParts, p)
				}
			}
			for i, expr := range one {
				parts := strings.Split(expr, ",")
				for j, p := range parts {
					if p == "" || p != strings.TrimSpace(p) {
						t.Fatalf("SplitTargets(%q): expression %q has an empty or untrimmed element", v, expr)
					}
					if j > 0 && !strings.HasPrefix(p, "-") {
						t.Fatalf("SplitTargets(%q): expression %q joins %q, which is not an exclusion", v, expr, p)
					}
					if j == 0 && i > 0 && strings.HasPrefix(p, "-") {
						t.Fatalf("SplitTargets(%q) = %q: exclusion %q is cut off from the elements before it", v, one, p)
					}
				}
				gotParts = append(gotParts, parts...)
			}
			if !reflect.DeepEqual(gotParts, wantParts) {
				t.Fatalf("SplitTargets(%q) = %q: elements %q, want %q", v, one, gotParts, wantParts)
			}
		}
		if !reflect.DeepEqual(out, perValue) {
			t.Fatalf("SplitTargets(%q) = %q, but value by value %q", values, out, perValue)
		}
		if again := SplitTargets(out); !reflect.DeepEqual(again, out) {
			t.Fatalf("SplitTargets not idempotent: %q → %q → %q", values, out, again)
		}
	})
}

// FuzzStreamID: for valid stream ids ("ms-seq" or "ms"), lessID is the
// order of (ms, seq), and nextID is the next id: above it, with nothing
// in between (the largest id has no next and stays itself).
func FuzzStreamID(f *testing.F) {
	for _, s := range [][2]string{{"0-0", "0-1"}, {"1-9", "2-0"}, {"1700000000000-3", "1700000000000-12"}, {"5", "5-0"},
		{"5-18446744073709551615", "6-0"}, {"18446744073709551615-18446744073709551615", "18446744073709551615-0"},
		{"18446744073709551616-0", "1-0"}, {"garbage", "0-0"}, {"-1-0", "1--1"}, {"", "-"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		am, as, aok := splitID(a)
		bm, bs, bok := splitID(b)
		if !aok {
			return
		}
		next := nextID(a)
		nm, ns, nok := splitID(next)
		if !nok {
			t.Fatalf("nextID(%q) = %q: not an id", a, next)
		}
		if am == math.MaxUint64 && as == math.MaxUint64 {
			if next != a && (nm != am || ns != as) {
				t.Fatalf("nextID of the largest id %q = %q", a, next)
			}
		} else {
			wm, ws := am, as+1
			if as == math.MaxUint64 {
				wm, ws = am+1, 0
			}
			if nm != wm || ns != ws || !lessID(a, next) {
				t.Fatalf("nextID(%q) = %q, want %d-%d", a, next, wm, ws)
			}
		}
		if !bok {
			return
		}
		if want := am < bm || (am == bm && as < bs); lessID(a, b) != want {
			t.Fatalf("lessID(%q, %q) = %v, want %v", a, b, lessID(a, b), want)
		}
		if lessID(a, b) && lessID(b, next) {
			t.Fatalf("%q lies between %q and nextID %q", b, a, next)
		}
	})
}
