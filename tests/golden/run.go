package golden

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// Call is what one step did against one cluster.
type Call struct {
	Step Step
	// Path and Body as sent ({{name}} replaced).
	Path string
	Body string
	// Skipped says why the step was not sent: Step.Skip, or a {{name}} no
	// earlier step captured.
	Skipped     string
	Status      int
	ContentType string
	RespBody    []byte
	// Captured are the values the step's Capture found in the answer.
	Captured map[string]string
}

// Runner runs the script against one cluster, keeping what steps capture.
type Runner struct {
	// URL is the cluster's base URL, e.g. http://127.0.0.1:9200.
	URL string
	// HTTP sends the requests (default: a client with a 30 s timeout).
	HTTP *http.Client
	vars map[string]string
}

// Vars are the values captured so far, by name.
func (r *Runner) Vars() map[string]string {
	out := make(map[string]string, len(r.vars))
	for k, v := range r.vars {
		out[k] = v
	}
	return out
}

var varRE = regexp.MustCompile(`\{\{([a-z]+)\}\}`)

// Do runs one step. The error is a failure to talk to the cluster; an
// answer of any status is a Call.
func (r *Runner) Do(ctx context.Context, s Step) (Call, error) {
	if r.vars == nil {
		r.vars = map[string]string{}
	}
	c := Call{Step: s, Path: s.Path, Body: s.Body}
	if s.Skip != "" {
		c.Skipped = s.Skip
		return c, nil
	}
	var missing []string
	subst := func(in string) string {
		return varRE.ReplaceAllStringFunc(in, func(m string) string {
			name := m[2 : len(m)-2]
			v, ok := r.vars[name]
			if !ok {
				missing = append(missing, name)
			}
			return v
		})
	}
	c.Path, c.Body = subst(s.Path), subst(s.Body)
	if len(missing) > 0 {
		c.Skipped = fmt.Sprintf("no %s: the step that captures it found nothing", strings.Join(missing, ", "))
		return c, nil
	}
	hc := r.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	var body io.Reader
	if c.Body != "" {
		body = strings.NewReader(c.Body)
	}
	req, err := http.NewRequestWithContext(ctx, s.Method, strings.TrimSuffix(r.URL, "/")+c.Path, body)
	if err != nil {
		return c, err
	}
	// As es sends them.
	req.Header.Set("Accept", "application/json")
	if c.Body != "" {
		ct := "application/json"
		if strings.Contains(c.Path, "_bulk") {
			ct = "application/x-ndjson"
		}
		req.Header.Set("Content-Type", ct)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return c, fmt.Errorf("step %s: %w", s.Name, err)
	}
	defer resp.Body.Close()
	if c.RespBody, err = io.ReadAll(resp.Body); err != nil {
		return c, fmt.Errorf("step %s: read the answer: %w", s.Name, err)
	}
	c.Status = resp.StatusCode
	c.ContentType, _, _ = mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if len(s.Capture) > 0 {
		c.Captured = map[string]string{}
		tree, _ := decode(c.RespBody)
		for name, path := range s.Capture {
			if v, ok := lookup(tree, splitPath(path)); ok {
				c.Captured[name] = v
				r.vars[name] = v
			}
		}
	}
	return c, nil
}

// Run runs every step in order, stopping at the first failure to talk to
// the cluster.
func (r *Runner) Run(ctx context.Context, steps []Step) ([]Call, error) {
	out := make([]Call, 0, len(steps))
	for _, s := range steps {
		c, err := r.Do(ctx, s)
		if err != nil {
			return out, err
		}
		out = append(out, c)
	}
	return out, nil
}

// decode parses a JSON body with numbers as json.Number (nil, false when
// the body is not JSON).
func decode(b []byte) (any, bool) {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if dec.More() {
		return nil, false
	}
	return v, true
}

// lookup returns the string or number at path.
func lookup(v any, path []string) (string, bool) {
	for _, seg := range path {
		switch t := v.(type) {
		case map[string]any:
			v = t[seg]
		case []any:
			var i int
			if _, err := fmt.Sscanf(seg, "%d", &i); err != nil || i < 0 || i >= len(t) {
				return "", false
			}
			v = t[i]
		default:
			return "", false
		}
	}
	switch t := v.(type) {
	case string:
		return t, t != ""
	case json.Number:
		return t.String(), true
	}
	return "", false
}

func splitPath(p string) []string {
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}
