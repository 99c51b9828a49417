package golden

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// File is one recorded call: internal/esemu/testdata/golden/<engine>/<NN>-<name>.json.
type File struct {
	// Engine is e.g. "elasticsearch-9 (Elasticsearch 9.5.3)".
	Engine string `json:"engine"`
	// Step is the file's name without .json, e.g. "09-stats".
	Step string `json:"step"`
	Why  string `json:"why,omitempty"`
	// Request is the step as the script has it ({{name}} unreplaced); the
	// test refuses a golden whose request is not the script's (re-record).
	Request Request `json:"request"`
	// SentPath is the path as sent, when a {{name}} was replaced in it.
	SentPath string `json:"sent_path,omitempty"`
	// Skipped says why the step was not run.
	Skipped string `json:"skipped,omitempty"`
	// Unreliable says why the answer is not compared.
	Unreliable string `json:"unreliable,omitempty"`
	// Captured are the values this step captured for later steps.
	Captured map[string]string `json:"captured,omitempty"`
	Response *Response         `json:"response,omitempty"`
}

// Request is a step's method, path and body: JSON in Body, NDJSON as one
// JSON value per line in NDJSON.
type Request struct {
	Method string            `json:"method"`
	Path   string            `json:"path"`
	Body   json.RawMessage   `json:"body,omitempty"`
	NDJSON []json.RawMessage `json:"ndjson,omitempty"`
}

// Response is an answer: the body as the engine wrote it (key order and
// number literals kept) when it is JSON, else its text.
type Response struct {
	Status      int             `json:"status"`
	ContentType string          `json:"content_type"`
	Body        json.RawMessage `json:"body,omitempty"`
	Text        *string         `json:"text,omitempty"`
}

// FileName is step i's (0-based) file name, e.g. "09-stats.json".
func FileName(i int, s Step) string { return fmt.Sprintf("%02d-%s.json", i+1, s.Name) }

// requestOf is how a step's request is written down.
func requestOf(s Step) (Request, error) {
	r := Request{Method: s.Method, Path: s.Path}
	body := strings.TrimSpace(s.Body)
	switch {
	case body == "":
	case json.Valid([]byte(body)):
		r.Body = json.RawMessage(body)
	default:
		for n, line := range strings.Split(body, "\n") {
			if !json.Valid([]byte(line)) {
				return r, fmt.Errorf("step %s: body line %d is not JSON: %s", s.Name, n+1, line)
			}
			r.NDJSON = append(r.NDJSON, json.RawMessage(line))
		}
	}
	return r, nil
}

// SameRequest reports whether a golden's request is the step's, and if not
// how they differ.
func SameRequest(f File, s Step) (bool, string) {
	want, err := requestOf(s)
	if err != nil {
		return false, err.Error()
	}
	got := f.Request
	if got.Method != want.Method || got.Path != want.Path {
		return false, fmt.Sprintf("the golden has %s %s, the script %s %s", got.Method, got.Path, want.Method, want.Path)
	}
	if !sameJSON(got.Body, want.Body) || len(got.NDJSON) != len(want.NDJSON) {
		return false, "the golden's request body is not the script's"
	}
	for i := range got.NDJSON {
		if !sameJSON(got.NDJSON[i], want.NDJSON[i]) {
			return false, fmt.Sprintf("the golden's NDJSON line %d is not the script's", i+1)
		}
	}
	return true, ""
}

func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// NewFile writes down a call of step i.
func NewFile(engine string, i int, c Call) (File, error) {
	req, err := requestOf(c.Step)
	if err != nil {
		return File{}, err
	}
	f := File{Engine: engine, Step: strings.TrimSuffix(FileName(i, c.Step), ".json"), Why: c.Step.Why, Request: req,
		Skipped: c.Skipped, Unreliable: c.Step.Unreliable, Captured: c.Captured}
	if c.Path != c.Step.Path {
		f.SentPath = c.Path
	}
	if c.Skipped == "" {
		f.Response = c.Response()
	}
	return f, nil
}

// Response is the call's answer as a golden holds it.
func (c Call) Response() *Response {
	r := &Response{Status: c.Status, ContentType: c.ContentType}
	if b := bytes.TrimSpace(c.RespBody); len(b) > 0 && json.Valid(b) {
		r.Body = json.RawMessage(b)
	} else {
		text := string(c.RespBody)
		r.Text = &text
	}
	return r
}

// Encode is the file's bytes: indented JSON, HTML characters unescaped,
// bodies with the engine's key order and number literals.
func (f File) Encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ReadDir reads one engine's goldens, by file name.
func ReadDir(dir string) (map[string]File, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	out := make(map[string]File, len(names))
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		var f File
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		out[filepath.Base(n)] = f
	}
	return out, nil
}
