package es

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// ErrConflict marks a write refused because the document is not at the
// version the write was conditioned on (409, version_conflict_engine_exception).
var ErrConflict = errors.New("version conflict")

// Doc is one document as GET /<index>/_doc/<id> returns it.
type Doc struct {
	Found              bool
	SeqNo, PrimaryTerm int64
	Source             json.RawMessage
}

// GetDoc reads a document, realtime (no refresh needed). A missing
// document, or a missing index, is a Doc with Found false.
func (c *Client) GetDoc(ctx context.Context, index, id string) (Doc, error) {
	op := "get " + index + "/" + id
	data, status, err := c.read(ctx, op, http.MethodGet, "/"+url.PathEscape(index)+"/_doc/"+url.PathEscape(id), nil, nil)
	if status == http.StatusNotFound {
		return Doc{}, nil // {"found":false}, or index_not_found_exception
	}
	if err != nil {
		return Doc{}, err
	}
	var d struct {
		Found       bool            `json:"found"`
		SeqNo       int64           `json:"_seq_no"`
		PrimaryTerm int64           `json:"_primary_term"`
		Source      json.RawMessage `json:"_source"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return Doc{}, &Error{Op: op, Status: status, Err: fmt.Errorf("%w: %v", ErrMalformed, err), Reason: "undecodable body"}
	}
	return Doc{Found: d.Found, SeqNo: d.SeqNo, PrimaryTerm: d.PrimaryTerm, Source: d.Source}, nil
}

// PutDoc writes a document over the version (ifSeqNo, ifPrimaryTerm) it
// was read at (if_seq_no, if_primary_term), or, with ifSeqNo -1, only if
// it does not exist (op_type=create): a refusal wraps ErrConflict. It
// returns the document's new seq no and primary term. The write is
// acknowledged once durable (the translog is fsynced per request by
// default); nothing is refreshed: GetDoc reads it back.
func (c *Client) PutDoc(ctx context.Context, index, id string, body any, ifSeqNo, ifPrimaryTerm int64) (seqNo, primaryTerm int64, err error) {
	op := "put " + index + "/" + id
	q := url.Values{}
	if ifSeqNo < 0 {
		q.Set("op_type", "create")
	} else {
		q.Set("if_seq_no", strconv.FormatInt(ifSeqNo, 10))
		q.Set("if_primary_term", strconv.FormatInt(ifPrimaryTerm, 10))
	}
	var out struct {
		SeqNo       int64 `json:"_seq_no"`
		PrimaryTerm int64 `json:"_primary_term"`
	}
	err = c.do(ctx, op, http.MethodPut, "/"+url.PathEscape(index)+"/_doc/"+url.PathEscape(id)+"?"+q.Encode(), body, &out)
	var ee *Error
	if errors.As(err, &ee) && ee.Status == http.StatusConflict {
		return 0, 0, fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return out.SeqNo, out.PrimaryTerm, err
}
