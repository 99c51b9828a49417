package esemu

import (
	"bufio"
	"compress/gzip"
	"compress/zlib"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// request is what a REST handler sees.
type request struct {
	method string
	path   string
	vars   map[string]string
	params url.Values
	body   []byte
	fault  Fault // the fault applied to this request, if any
}

func (r *request) param(name string) string { return r.params.Get(name) }

func (r *request) has(name string) bool { _, ok := r.params[name]; return ok }

// boolParam reads a boolean URL parameter ("" or "true" is true when present).
func (r *request) boolParam(name string, def bool) (bool, *esError) {
	if !r.has(name) {
		return def, nil
	}
	switch v := r.param(name); v {
	case "", "true":
		return true, nil
	case "false":
		return false, nil
	default:
		return false, errIllegalArgument("Failed to parse value [%s] as only [true] or [false] are allowed.", v)
	}
}

func (r *request) intParam(name string, def int) (int, *esError) {
	if !r.has(name) {
		return def, nil
	}
	n, err := strconv.Atoi(r.param(name))
	if err != nil {
		return 0, errIllegalArgument("Failed to parse int parameter [%s] with value [%s]", name, r.param(name))
	}
	return n, nil
}

// jsonBody decodes the body as a JSON object (nil for an empty body).
func (r *request) jsonBody() (map[string]any, *esError) {
	if len(strings.TrimSpace(string(r.body))) == 0 {
		return nil, nil
	}
	var m map[string]any
	if err := decodeJSON(r.body, &m); err != nil {
		return nil, newError(http.StatusBadRequest, "x_content_parse_exception", "Failed to parse request body: %v", err)
	}
	return m, nil
}

// reply is a handler's answer: a status and a JSON body, or raw bytes.
type reply struct {
	status int
	body   any
	header http.Header
}

type handlerFunc func(c *Cluster, r *request) (reply, *esError)

// route is one REST endpoint: method, path pattern, request kind, accepted
// URL parameters.
type route struct {
	method  string
	pattern []string
	kind    string
	params  map[string]bool
	handle  handlerFunc
	name    string
}

// globalUnmodeledParams are URL parameters ES accepts on every endpoint that
// the emulator does not model: refused loudly, not as unrecognized.
var globalUnmodeledParams = map[string]bool{"source": true, "source_content_type": true}

// commonParams are accepted by every endpoint.
var commonParams = []string{"pretty", "human", "error_trace", "format", "filter_path"}

func (c *Cluster) addRoute(routes *[]route, method, pattern, kind string, params string, h handlerFunc) {
	ps := map[string]bool{}
	for _, p := range commonParams {
		ps[p] = true
	}
	for _, p := range strings.Fields(params) {
		ps[p] = true
	}
	*routes = append(*routes, route{method: method, pattern: splitPath(pattern), kind: kind, params: ps, handle: h, name: method + " " + pattern})
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// match reports whether the path segments fit the route's pattern and binds
// its {variables}.
func (rt *route) match(segs []string) (map[string]string, bool) {
	if len(segs) != len(rt.pattern) {
		return nil, false
	}
	vars := map[string]string{}
	for i, p := range rt.pattern {
		if strings.HasPrefix(p, "{") {
			name := p[1 : len(p)-1]
			// Index-like variables never bind an API keyword such as _search.
			if name != "id" && name != "scroll_id" && strings.HasPrefix(segs[i], "_") && segs[i] != "_all" {
				return nil, false
			}
			vars[name] = segs[i]
			continue
		}
		if p != segs[i] {
			return nil, false
		}
	}
	return vars, true
}

func (c *Cluster) handler() http.Handler {
	routes := c.routes()
	return http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		c.serve(routes, w, hr)
	})
}

func (c *Cluster) serve(routes []route, w http.ResponseWriter, hr *http.Request) {
	rawPath := hr.URL.EscapedPath()
	var segs []string
	for _, s := range splitPath(rawPath) {
		u, err := url.PathUnescape(s)
		if err != nil {
			u = s
		}
		segs = append(segs, u)
	}
	// Like ES and OpenSearch (Netty's HttpContentDecompressor), accept
	// gzip- and deflate-compressed request bodies.
	var rd io.Reader = hr.Body
	switch strings.ToLower(strings.TrimSpace(hr.Header.Get("Content-Encoding"))) {
	case "gzip", "x-gzip":
		if zr, zerr := gzip.NewReader(hr.Body); zerr == nil {
			rd = zr
		} else {
			rd = errReader{zerr}
		}
	case "deflate", "x-deflate":
		if zr, zerr := zlib.NewReader(hr.Body); zerr == nil {
			rd = zr
		} else {
			rd = errReader{zerr}
		}
	}
	body, err := io.ReadAll(rd)
	if err != nil {
		c.writeError(w, hr, newError(http.StatusBadRequest, "parse_exception", "failed to read request body: %v", err))
		return
	}
	isControl := len(segs) > 0 && segs[0] == "_esemu"
	if !isControl && !c.authorized(w, hr) {
		return
	}
	var rt *route
	var vars map[string]string
	var methodMismatch []string
	find := func(method string) {
		for i := range routes {
			v, ok := routes[i].match(segs)
			if !ok {
				continue
			}
			if routes[i].method != method {
				methodMismatch = append(methodMismatch, routes[i].method)
				continue
			}
			rt, vars = &routes[i], v
			return
		}
	}
	find(hr.Method)
	if rt == nil && hr.Method == http.MethodHead {
		find(http.MethodGet)
	}
	if rt == nil {
		if len(methodMismatch) > 0 {
			allowed := uniqueSorted(methodMismatch)
			w.Header().Set("Allow", strings.Join(allowed, ","))
			c.writeJSON(w, hr, http.StatusMethodNotAllowed, obj("error",
				fmt.Sprintf("Incorrect HTTP method for uri [%s] and method [%s], allowed: [%s]", hr.URL.RequestURI(), hr.Method, strings.Join(allowed, ", ")),
				"status", http.StatusMethodNotAllowed))
			return
		}
		c.writeError(w, hr, errNotModeled("endpoint [%s %s]", hr.Method, rawPath))
		return
	}
	params := hr.URL.Query()
	var unknown []string
	for p := range params {
		if !rt.params[p] {
			unknown = append(unknown, p)
		}
	}
	for _, p := range unknown {
		if globalUnmodeledParams[p] {
			c.writeError(w, hr, errNotModeled("parameter [%s] (ES accepts it on every endpoint)", p))
			return
		}
	}
	if len(unknown) > 0 {
		candidates := make([]string, 0, len(rt.params))
		for p := range rt.params {
			candidates = append(candidates, p)
		}
		c.writeError(w, hr, errUnrecognizedParams(rawPath, unknown, candidates))
		return
	}
	req := &request{method: hr.Method, path: rawPath, vars: vars, params: params, body: body}
	if !isControl {
		c.countRequest(rt.kind)
		if f, ok := c.faults.take(rt.kind); ok {
			req.fault = f
			if f.Delay > 0 {
				select {
				case <-time.After(f.Delay):
				case <-hr.Context().Done():
					return
				}
			}
			if f.Status != 0 {
				c.writeError(w, hr, faultError(f.Status, rt.kind))
				return
			}
		}
	}
	rep, e := rt.handle(c, req)
	if req.fault.Drop {
		c.dropMidResponse(w, rep, e)
		return
	}
	if e != nil {
		c.writeError(w, hr, e)
		return
	}
	for k, vs := range rep.header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if raw, ok := rep.body.([]byte); ok {
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		w.WriteHeader(rep.status)
		if hr.Method != http.MethodHead {
			_, _ = w.Write(raw)
		}
		return
	}
	if f := params.Get("filter_path"); f != "" {
		filtered, e := filterPath(rep.body, f)
		if e != nil {
			c.writeError(w, hr, e)
			return
		}
		rep.body = filtered
	}
	c.writeJSON(w, hr, rep.status, rep.body)
}

func uniqueSorted(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// faultError is the body an injected status answers with.
func faultError(status int, kind string) *esError {
	switch status {
	case http.StatusTooManyRequests:
		return errRejected(kind)
	case http.StatusServiceUnavailable:
		return newError(status, "cluster_block_exception", "blocked by: [SERVICE_UNAVAILABLE/2/no master]; (injected by esemu)")
	default:
		return newError(status, "esemu_injected_exception", "injected HTTP %d for a %s request", status, kind)
	}
}

// dropMidResponse answers with a status line, headers and half a body, then
// closes the connection: the client sees an unexpected EOF after the server
// already did the work.
func (c *Cluster) dropMidResponse(w http.ResponseWriter, rep reply, e *esError) {
	var body []byte
	if e != nil {
		body, _ = marshalJSON(e.response())
	} else {
		body, _ = marshalJSON(rep.body)
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	_, _ = buf.Write(body[:len(body)/2])
	_ = buf.Flush()
}

func (c *Cluster) writeJSON(w http.ResponseWriter, hr *http.Request, status int, body any) {
	var b []byte
	var err error
	if _, pretty := hr.URL.Query()["pretty"]; pretty {
		b, err = marshalJSONIndent(body, "  ")
	} else {
		b, err = marshalJSON(body)
	}
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = marshalJSON(newError(status, "esemu_exception", "encode response: %v", err).response())
	}
	w.Header().Set("Content-Type", "application/json")
	if !c.info.openSearch {
		w.Header().Set("X-elastic-product", "Elasticsearch")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	if hr.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}

func (c *Cluster) writeError(w http.ResponseWriter, hr *http.Request, e *esError) {
	c.writeJSON(w, hr, e.status, e.response())
}

// authorized checks basic auth and API keys when configured, answering 401
// the way each product does.
func (c *Cluster) authorized(w http.ResponseWriter, hr *http.Request) bool {
	if len(c.cfg.Users) == 0 && len(c.cfg.APIKeys) == 0 {
		return true
	}
	h := hr.Header.Get("Authorization")
	user := ""
	switch {
	case strings.HasPrefix(h, "Basic "):
		u, p, ok := hr.BasicAuth()
		user = u
		if ok {
			if want, found := c.cfg.Users[u]; found && subtle.ConstantTimeCompare([]byte(want), []byte(p)) == 1 {
				return true
			}
		}
	case strings.HasPrefix(h, "ApiKey ") && !c.info.openSearch:
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(h, "ApiKey "))
		if err == nil {
			id, key, _ := strings.Cut(string(raw), ":")
			if want, found := c.cfg.APIKeys[id]; found && subtle.ConstantTimeCompare([]byte(want), []byte(key)) == 1 {
				return true
			}
		}
	}
	if c.info.openSearch {
		w.Header().Set("WWW-Authenticate", `Basic realm="OpenSearch Security"`)
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, "Unauthorized")
		return false
	}
	reason := fmt.Sprintf("missing authentication credentials for REST request [%s]", hr.URL.RequestURI())
	if h != "" {
		if user != "" {
			reason = fmt.Sprintf("unable to authenticate user [%s] for REST request [%s]", user, hr.URL.RequestURI())
		} else {
			reason = "unable to authenticate with provided credentials and anonymous access is not allowed for this request"
		}
	}
	e := newError(http.StatusUnauthorized, "security_exception", "%s", reason).
		with("header", obj("WWW-Authenticate", []string{`Basic realm="security", charset="UTF-8"`, `Bearer realm="security"`, "ApiKey"}))
	w.Header().Add("WWW-Authenticate", `Basic realm="security", charset="UTF-8"`)
	w.Header().Add("WWW-Authenticate", `Bearer realm="security"`)
	w.Header().Add("WWW-Authenticate", "ApiKey")
	c.writeError(w, hr, e)
	return false
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// ndjsonLines splits an NDJSON body into lines, keeping empty trailing ones
// out.
func ndjsonLines(body []byte) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<30)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
