package es

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// BulkItem is the answer to one action of a _bulk request.
type BulkItem struct {
	// Action is the item's key in the answer: "index", "create", "update"
	// or "delete" (an index action with op_type create answers as "create").
	Action string
	Index  string
	ID     string
	// Status is the item's HTTP status: 200/201 written, 404 with Result
	// "not_found" for a delete of a missing document, 409 version conflict,
	// 4xx/5xx with ErrorType set otherwise.
	Status int
	// Result is "created", "updated", "deleted", "not_found" or "noop" for an
	// item that was carried out; empty for a failed one.
	Result string
	// Version is the document's _version after the write (0 when failed).
	Version int64
	// SeqNo and PrimaryTerm of the write; -1 and 0 when absent (failed
	// items); -2 and 0, as Elasticsearch 9.5 answers, on an index with
	// sequence numbers disabled.
	SeqNo       int64
	PrimaryTerm int64
	// ErrorType and ErrorReason come from the item's error object, the
	// reason followed by its caused_by, if any.
	ErrorType   string
	ErrorReason string
}

// Err is nil for an item that was carried out (2xx, or a delete that found
// nothing: 404 "not_found" without an error) and an *Error otherwise, whose
// Temporary says whether sending the action again may succeed (429, 5xx).
func (it BulkItem) Err() error {
	if it.ErrorType == "" && (it.Status/100 == 2 || (it.Status == http.StatusNotFound && it.Result == "not_found")) {
		return nil
	}
	reason := it.ErrorReason
	if reason == "" && it.ErrorType == "" {
		reason = "the item failed without an error object"
	}
	return &Error{Op: fmt.Sprintf("bulk %s %s/%s", it.Action, it.Index, it.ID), Status: it.Status, Type: it.ErrorType, Reason: reason}
}

// BulkResult is a _bulk answer: one item per action, in request order.
type BulkResult struct {
	Took int64
	// Errors is the answer's "errors" flag: true when at least one item failed.
	Errors bool
	Items  []BulkItem
}

// bulkAction is what the client needs from a request's action line to match
// the answer's items to it.
type bulkAction struct {
	action string
	id     string
}

// Bulk sends body, NDJSON action/source lines ending with a newline, to
// POST /_bulk and returns each action's item in request order. A failure of
// the whole request (connection, timeout, non-2xx status, an answer that is
// not a bulk answer or whose items do not match the actions one to one) is
// an *Error; per-item failures are in the result, not the error. A body that
// is not well-formed bulk NDJSON is refused before sending, with an error
// that is not an *Error (sending it again cannot help).
//
// Bulk blocks until the answer or the client's RequestTimeout. It is safe
// for concurrent use. The answer's "errors" flag is reported, not trusted:
// callers decide per item.
func (c *Client) Bulk(ctx context.Context, body []byte) (BulkResult, error) {
	actions, err := parseBulkActions(body)
	if err != nil {
		return BulkResult{}, err
	}
	op := fmt.Sprintf("bulk of %d actions", len(actions))
	var r struct {
		Took   int64                        `json:"took"`
		Errors bool                         `json:"errors"`
		Items  []map[string]json.RawMessage `json:"items"`
	}
	if err := c.send(ctx, op, http.MethodPost, "/_bulk", "application/x-ndjson", body, &r); err != nil {
		return BulkResult{}, err
	}
	if r.Items == nil {
		return BulkResult{}, &Error{Op: op, Status: http.StatusOK, Reason: "no items in the answer: is this a _bulk endpoint?", Err: ErrMalformed}
	}
	if len(r.Items) != len(actions) {
		return BulkResult{}, &Error{Op: op, Status: http.StatusOK, Reason: fmt.Sprintf("%d items for %d actions", len(r.Items), len(actions)), Err: ErrMalformed}
	}
	res := BulkResult{Took: r.Took, Errors: r.Errors, Items: make([]BulkItem, len(r.Items))}
	for i, wrapped := range r.Items {
		bad := func(why string) error {
			return &Error{Op: op, Status: http.StatusOK, Reason: fmt.Sprintf("item %d: %s", i, why), Err: ErrMalformed}
		}
		if len(wrapped) != 1 {
			return BulkResult{}, bad(fmt.Sprintf("%d keys, want one action", len(wrapped)))
		}
		var it BulkItem
		var raw json.RawMessage
		for k, v := range wrapped {
			it.Action, raw = k, v
		}
		want := actions[i]
		if it.Action != want.action && (want.action != "index" || it.Action != "create") {
			return BulkResult{}, bad(fmt.Sprintf("answers %q to action %q", it.Action, want.action))
		}
		var b struct {
			Index       string          `json:"_index"`
			ID          *string         `json:"_id"`
			Version     int64           `json:"_version"`
			Result      string          `json:"result"`
			SeqNo       *int64          `json:"_seq_no"`
			PrimaryTerm int64           `json:"_primary_term"`
			Status      int             `json:"status"`
			Error       json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(raw, &b); err != nil {
			return BulkResult{}, bad(err.Error())
		}
		if b.Status == 0 {
			return BulkResult{}, bad("no status")
		}
		it.Index, it.Status, it.Version, it.Result, it.PrimaryTerm = b.Index, b.Status, b.Version, b.Result, b.PrimaryTerm
		it.SeqNo = -1
		if b.SeqNo != nil {
			it.SeqNo = *b.SeqNo
		}
		it.ID = want.id
		if b.ID != nil {
			if want.id != "" && *b.ID != want.id {
				return BulkResult{}, bad(fmt.Sprintf("_id %q answers the action for _id %q", *b.ID, want.id))
			}
			it.ID = *b.ID
		}
		if len(b.Error) > 0 && string(b.Error) != "null" {
			it.ErrorType, it.ErrorReason = decodeItemError(b.Error)
			if it.ErrorType == "" {
				it.ErrorType = "unknown_error"
			}
		}
		res.Items[i] = it
	}
	return res, nil
}

// decodeItemError reads a bulk item's error: an object with type, reason
// and caused_by (or, from proxies, a plain string).
func decodeItemError(raw json.RawMessage) (typ, reason string) {
	var obj struct {
		Type     string `json:"type"`
		Reason   string `json:"reason"`
		CausedBy *struct {
			Type   string `json:"type"`
			Reason string `json:"reason"`
		} `json:"caused_by"`
	}
	if err := json.Unmarshal(raw, &obj); err == nil {
		reason = obj.Reason
		if cb := obj.CausedBy; cb != nil && (cb.Type != "" || cb.Reason != "") {
			reason += fmt.Sprintf(" (caused by %s: %s)", cb.Type, cb.Reason)
		}
		return obj.Type, reason
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return "", text
	}
	return "", string(raw)
}

// parseBulkActions lists the actions of a bulk body: each non-blank line is
// an action object {"index"|"create"|"update"|"delete": {…}}; every action
// but delete is followed by one source line.
func parseBulkActions(body []byte) ([]bulkAction, error) {
	if len(body) == 0 {
		return nil, fmt.Errorf("bulk: empty body: want at least one action")
	}
	if body[len(body)-1] != '\n' {
		return nil, fmt.Errorf("bulk: the body must end with a newline")
	}
	lines := bytes.Split(body[:len(body)-1], []byte{'\n'})
	var out []bulkAction
	for i := 0; i < len(lines); i++ {
		line := bytes.TrimSpace(lines[i])
		if len(line) == 0 {
			continue
		}
		var a map[string]struct {
			ID *string `json:"_id"`
		}
		if err := json.Unmarshal(line, &a); err != nil || len(a) != 1 {
			return nil, fmt.Errorf("bulk: line %d is not an action object such as {\"index\":{…}}", i+1)
		}
		var ba bulkAction
		for k, v := range a {
			ba.action = k
			if v.ID != nil {
				ba.id = *v.ID
			}
		}
		switch ba.action {
		case "index", "create", "update":
			i++
			if i >= len(lines) {
				return nil, fmt.Errorf("bulk: line %d: %s action without a source line", i, ba.action)
			}
		case "delete":
		default:
			return nil, fmt.Errorf("bulk: line %d: action %q: want index, create, update or delete", i+1, ba.action)
		}
		out = append(out, ba)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bulk: no action in the body")
	}
	return out, nil
}

// send is do for bodies that are already encoded (NDJSON): it sends body
// with contentType and decodes a 2xx JSON answer into out. Other statuses
// become *Error.
func (c *Client) send(ctx context.Context, op, method, path, contentType string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.perform(func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, method, path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Accept", "application/json")
		return req, nil
	})
	if err != nil {
		return &Error{Op: op, Err: c.explainTransport(err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return &Error{Op: op, Err: fmt.Errorf("read response: %w", err)}
	}
	if resp.StatusCode >= 300 {
		return decodeError(op, resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		reason := "undecodable body"
		if s := strings.TrimSpace(string(data)); len(s) > 0 && len(s) <= 200 {
			reason += ": " + s
		}
		return &Error{Op: op, Status: resp.StatusCode, Err: fmt.Errorf("%w: %v", ErrMalformed, err), Reason: reason}
	}
	return nil
}
