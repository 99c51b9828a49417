package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// oddIDs are document ids that break naive URL building or byte counting:
// unicode, '/', spaces, '%', '+', '?', '#', quotes, and exactly 512 bytes
// (Elasticsearch's limit) in ASCII and in two-byte characters.
func oddIDs() []string {
	return []string{
		"ünïcødé-日本語-😀",
		"a/b/c",
		"/leading-slash",
		"with space",
		" padded ",
		"100%",
		"50%25",
		"a+b",
		"what?x=1&y=2",
		"#hash",
		`quote"and\back`,
		"<tag>&amp;",
		strings.Repeat("x", 512),
		strings.Repeat("é", 256),
	}
}

// oddSources are compact document sources that must come through byte for
// byte: empty, unicode escapes and raw unicode, HTML characters, big
// integers, floats like 1.0, exponents, -0.0, nulls, nested empties.
func oddSources() map[string]string {
	deep := strings.Repeat(`{"a":`, 100) + `{"leaf":[` + strings.Repeat("[", 50) + "1.0" + strings.Repeat("]", 50) + `]}` + strings.Repeat("}", 100)
	var huge strings.Builder
	huge.WriteString(`{"blob":"`)
	for huge.Len() < 5<<20 {
		huge.WriteString(`lorem ipsum ünïcødé 日本語 \"quoted\" \\ \u00e9 <&> `)
	}
	huge.WriteString(`","n":1}`)
	return map[string]string{
		"empty":   `{}`,
		"unusual": `{"esc":"\u00e9\u0000\ud83d\ude00\n\t\"\\\/","raw":"é日本😀","html":"<b>&amp;</b>","ls":"a` + "\u2028" + `b","big":12345678901234567890,"f":1.0,"f2":1.10,"exp":1E+2,"neg":-0.0,"nil":null,"arr":[1.0,[],{},""],"obj":{"":{}}}`,
		"deep":    deep,
		"huge":    huge.String(),
	}
}

// TestRoundTrip_UnusualDocuments: documents with odd ids and sources go
// through the relay into the stream, then through consume into another
// cluster (bulk sink) and onto stdout, unchanged: the stream entry's source
// and the mirrored _source are the indexed bytes, the ids exact. The indices
// are created with "enabled": false, as one would for documents too deep
// for index.mapping.depth.limit on a real cluster.
func TestRoundTrip_UnusualDocuments(t *testing.T) {
	t.Parallel()
	for _, fl := range []esemu.Flavor{esemu.FlavorES9, esemu.FlavorOpenSearch2} {
		t.Run(string(fl), func(t *testing.T) { roundTrip(t, fl) })
	}
}

func roundTrip(t *testing.T, fl esemu.Flavor) {
	src := cluster(t, esemu.Config{Flavor: fl})
	dst := cluster(t, esemu.Config{Flavor: fl})
	const index = "odd"
	settings := `{"settings":{"number_of_shards":3,"number_of_replicas":0},"mappings":{"enabled":false}}`
	mustDo(t, "PUT", src.URL()+"/"+index, settings)
	mustDo(t, "PUT", dst.URL()+"/"+index, settings)

	want := map[string]string{} // id -> source as indexed
	for _, id := range oddIDs() {
		want[id] = fmt.Sprintf(`{"id":%s}`, jsonString(id))
	}
	for name, s := range oddSources() {
		want[name] = s
	}
	for id, s := range want {
		mustDo(t, "PUT", src.URL()+"/"+index+"/_doc/"+url.PathEscape(id), s)
	}
	mustDo(t, "POST", src.URL()+"/"+index+"/_refresh", "")

	t.Run("513-byte id is refused", func(t *testing.T) {
		long := strings.Repeat("é", 256) + "x"
		st, body := httpDo(t, "PUT", src.URL()+"/"+index+"/_doc/"+url.PathEscape(long), `{}`)
		var r struct {
			Error struct {
				Type   string `json:"type"`
				Reason string `json:"reason"`
			} `json:"error"`
		}
		_ = json.Unmarshal(body, &r)
		wantReason := "Validation Failed: 1: id [" + long + "] is too long, must be no longer than 512 bytes but was: 513;"
		if st != 400 || r.Error.Type != "action_request_validation_exception" || r.Error.Reason != wantReason {
			t.Errorf("PUT a 513-byte id: %d %s %q, want 400 action_request_validation_exception %q", st, r.Error.Type, r.Error.Reason, wantReason)
		}
	})

	// The cluster holds what was sent, byte for byte (the emulator's own
	// fidelity, so a difference below is the feed's).
	for id, s := range want {
		if got := getSource(t, src, index, id); got != s {
			t.Fatalf("the source cluster returns %s as %.200q, want %.200q", id, got, s)
		}
	}

	srv := redistest.Start(t)
	f := startRelayDeletes(t, src, srv.URL(), "odd", []string{index}, func(*deletes.Config) {}, nil)
	waitCaughtUp(t, src, f.store, []string{index}, 30*time.Second)

	t.Run("stream", func(t *testing.T) {
		got := map[string]string{}
		for _, e := range entries(t, f.rdb, f.keys.Events()) {
			if _, dup := got[e.ID]; dup {
				t.Errorf("id %q twice in the stream", e.ID)
			}
			got[e.ID] = string(e.Source)
		}
		diffSources(t, "stream", want, got)
	})

	// The mirror runs until the test ends (the deletes go through it too).
	startBinary(t, consumeArgs(srv.URL(), "odd", "mirror", "mirror-1", dst.URL())...)
	t.Run("bulk sink", func(t *testing.T) {
		waitGroupDone(t, f.rdb, f.keys.Events(), "mirror", 30*time.Second)
		got := map[string]string{}
		for id := range targetDocs(t, dst, index) {
			got[id] = getSource(t, dst, index, id)
		}
		diffSources(t, "mirror", want, got)
	})

	t.Run("stdout sink", func(t *testing.T) {
		// stdout alone: a log line on stderr must not split a 5 MB line.
		var stdout, stderr syncBuffer
		cmd := binaryCommand(t, nil, "consume", "--redis", srv.URL(), "--feed", "odd", "--group", "print", "--sink", "stdout")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		waitGroupDone(t, f.rdb, f.keys.Events(), "print", 30*time.Second)
		// Acknowledged once written to the pipe: wait for the pipe to drain.
		n := len(entries(t, f.rdb, f.keys.Events()))
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(stdout.String(), "\n") < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d lines on stdout, want %d; stderr:\n%s", strings.Count(stdout.String(), "\n"), n, stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		got := map[string]string{}
		sc := bufio.NewScanner(strings.NewReader(stdout.String()))
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			line := sc.Bytes()
			var ev struct {
				ID     string          `json:"id"`
				Source json.RawMessage `json:"source"`
			}
			if err := json.Unmarshal(line, &ev); err != nil {
				var se *json.SyntaxError
				if errors.As(err, &se) {
					lo := max(0, int(se.Offset)-300)
					t.Logf("around offset %d of %d: %q", se.Offset, len(line), line[lo:min(len(line), int(se.Offset)+100)])
				}
				t.Fatalf("stdout line is not JSON: %v: %.300s", err, line)
			}
			got[ev.ID] = string(ev.Source)
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		diffSources(t, "stdout", want, got)
	})

	t.Run("deletes", func(t *testing.T) {
		gone := []string{"a/b/c", "with space", "100%", strings.Repeat("é", 256)}
		for _, id := range gone {
			mustDo(t, "DELETE", src.URL()+"/"+index+"/_doc/"+url.PathEscape(id), "")
			delete(want, id)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			deleted := map[string]bool{}
			for _, e := range entries(t, f.rdb, f.keys.Events()) {
				if e.Op == redisx.OpDelete {
					deleted[e.ID] = true
				}
			}
			if len(deleted) == len(gone) {
				for _, id := range gone {
					if !deleted[id] {
						t.Fatalf("delete events for %v, want %q", deleted, gone)
					}
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("delete events for %v after 30s, want %q", deleted, gone)
			}
			time.Sleep(100 * time.Millisecond)
		}
		waitGroupDone(t, f.rdb, f.keys.Events(), "mirror", 30*time.Second)
		got := map[string]string{}
		for id := range targetDocs(t, dst, index) {
			got[id] = getSource(t, dst, index, id)
		}
		diffSources(t, "mirror after deletes", want, got)
	})
}

// getSource reads a document's _source as the cluster sends it.
func getSource(tb testing.TB, c *esemu.Cluster, index, id string) string {
	tb.Helper()
	body := mustDo(tb, "GET", c.URL()+"/"+index+"/_doc/"+url.PathEscape(id), "")
	var r struct {
		ID     string          `json:"_id"`
		Found  bool            `json:"found"`
		Source json.RawMessage `json:"_source"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		tb.Fatalf("GET %s: %v", id, err)
	}
	if !r.Found || r.ID != id {
		tb.Fatalf("GET %q: found %v, _id %q", id, r.Found, r.ID)
	}
	return string(r.Source)
}

// diffSources fails unless got has exactly want's ids with the same bytes.
func diffSources(tb testing.TB, where string, want, got map[string]string) {
	tb.Helper()
	var problems []string
	for id, w := range want {
		g, ok := got[id]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("missing %q", id))
		case g != w:
			problems = append(problems, fmt.Sprintf("%q: %d bytes %.120q, want %d bytes %.120q", id, len(g), g, len(w), w))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			problems = append(problems, fmt.Sprintf("unexpected id %q", id))
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		tb.Errorf("%s differs from what was indexed:\n%s", where, strings.Join(problems, "\n"))
	}
}

func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}
