package golden

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCompare(t *testing.T) {
	resp := func(status int, body string) Response {
		return Response{Status: status, ContentType: "application/json", Body: json.RawMessage(body)}
	}
	tests := []struct {
		name      string
		step      Step
		want, got Response
		wantVars  map[string]string
		gotVars   map[string]string
		diffs     []string // substrings, one per expected difference
	}{
		{name: "same shape, other values", want: resp(200, `{"took":5,"uuid":"abc"}`), got: resp(200, `{"took":0,"uuid":"xyz"}`)},
		{name: "status", want: resp(200, `{}`), got: resp(400, `{}`), diffs: []string{"status: the engine answers 200, the emulator 400"}},
		{name: "integer for a fraction", want: resp(200, `{"key":0.0}`), got: resp(200, `{"key":0}`),
			diffs: []string{"key: the engine has a fraction (0.0), the emulator a integer (0)"}},
		{name: "missing and extra keys", want: resp(200, `{"a":1,"b":{"c":1}}`), got: resp(200, `{"b":{"d":1}}`),
			diffs: []string{"(root): the emulator lacks a", "b: the emulator lacks c", "b: the emulator has d"}},
		{name: "array lengths", want: resp(200, `{"l":[{"x":1},{"x":2}]}`), got: resp(200, `{"l":[{"x":1}]}`),
			diffs: []string{"l: the engine has 2 elements, the emulator 1"}},
		{name: "values where compared", want: resp(200, `{"count":3,"hits":{"hits":[{"_id":"a"}]}}`),
			got:   resp(200, `{"count":4,"hits":{"hits":[{"_id":"b"}]}}`),
			diffs: []string{"count: the engine has 3, the emulator 4", `hits/hits/0/_id: the engine has "a", the emulator "b"`}},
		{name: "loose beats same", step: Step{Loose: []string{"count"}}, want: resp(200, `{"count":3}`), got: resp(200, `{"count":4}`)},
		{name: "step's own same", step: Step{Same: []string{"x/*/y"}}, want: resp(200, `{"x":[{"y":1}]}`), got: resp(200, `{"x":[{"y":2}]}`),
			diffs: []string{"x/0/y: the engine has 1, the emulator 2"}},
		{name: "subset", step: Step{Subset: []string{"d"}}, want: resp(200, `{"d":{"a":"1","b":"2"}}`), got: resp(200, `{"d":{"a":"1","z":"3"}}`),
			diffs: []string{"d: the emulator has z"}},
		{name: "ignore", step: Step{Ignore: []string{"d"}}, want: resp(200, `{"d":{"a":1}}`), got: resp(200, `{"d":[]}`)},
		{name: "captured values and dates normalized", step: Step{Same: []string{"old_index"}},
			want: resp(200, `{"old_index":".ds-x-2026.01.02-000001","indices":{"nodeA1":{}}}`), wantVars: map[string]string{"node": "nodeA1"},
			got: resp(200, `{"old_index":".ds-x-2027.03.04-000001","indices":{"nodeB2":{}}}`), gotVars: map[string]string{"node": "nodeB2"}},
		{name: "error type", want: resp(404, `{"error":{"root_cause":[{"type":"index_not_found_exception"}],"type":"index_not_found_exception"},"status":404}`),
			got:   resp(404, `{"error":{"root_cause":[{"type":"illegal_argument_exception"}],"type":"index_not_found_exception"},"status":404}`),
			diffs: []string{"error/root_cause/0/type"}},
		{name: "text for JSON", want: resp(200, `{}`), got: Response{Status: 200, ContentType: "application/json", Text: ptr("oops")},
			diffs: []string{`body: the engine answers JSON, the emulator text "oops"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Compare(tt.step, tt.want, tt.got, tt.wantVars, tt.gotVars)
			if len(got) != len(tt.diffs) {
				t.Fatalf("got %d differences, want %d:\n%s", len(got), len(tt.diffs), strings.Join(got, "\n"))
			}
			for i, want := range tt.diffs {
				if !strings.Contains(got[i], want) {
					t.Errorf("difference %d = %q, want it to contain %q", i, got[i], want)
				}
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestScript_Complete(t *testing.T) {
	for _, target := range Targets {
		t.Run(target.Engine, func(t *testing.T) {
			steps := Script(target)
			if got, want := len(steps), len(Script(Targets[0])); got != want {
				t.Fatalf("%d steps, want %d as on %s: every target numbers the steps alike", got, want, Targets[0].Engine)
			}
			seen := map[string]bool{}
			captured := map[string]bool{}
			for i, s := range steps {
				if seen[s.Name] {
					t.Errorf("step %d: name %q twice", i+1, s.Name)
				}
				seen[s.Name] = true
				if _, err := requestOf(s); err != nil {
					t.Errorf("step %d: %v", i+1, err)
				}
				for _, m := range varRE.FindAllStringSubmatch(s.Path+s.Body, -1) {
					if !captured[m[1]] {
						t.Errorf("step %d (%s) uses {{%s}}, which no earlier step captures", i+1, s.Name, m[1])
					}
				}
				for name := range s.Capture {
					captured[name] = true
				}
			}
		})
	}
}
