package es

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// A search page is most of what the relay decodes: encoding/json scans
// every byte of it three times (a validity pre-scan, the decode, a skip of
// each _source for json.RawMessage) and allocates per field. parseSearch
// reads the one shape SearchShard asks for in a single pass, validating
// every byte it passes over as encoding/json would (strings, escapes,
// numbers, literals, nesting), and keeps each _source as the bytes the
// engine sent, a sub-slice of the body. Strings with an escape or a
// non-ASCII byte are decoded by encoding/json itself (rare in ids and
// routing values). A hit's keys match as with encoding/json (exactly,
// else case-insensitively; of a repeated key the last wins; null leaves a
// string as it was and unsets a number); the envelope's keys match
// exactly. FuzzParseSearch
// compares it with encoding/json.

// searchResponse is the part of a search answer the relay reads.
type searchResponse struct {
	TimedOut bool
	Shards   shardsHeader
	Hits     []rawHit
}

// rawHit is one hit as sent.
type rawHit struct {
	Index, ID, Routing          string
	SeqNo, PrimaryTerm, Version optInt
	Source                      []byte
}

// optInt is a number of a hit; Set is false when it was absent or null. (A
// value, not an *int64: a pointer per number was three allocations a hit.)
type optInt struct {
	N   int64
	Set bool
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

var errSyntax = errors.New("invalid JSON")

type scanner struct {
	b []byte
	i int
	// index is the last _index of a hit read.
	index string
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("%w at offset %d: %s", errSyntax, s.i, fmt.Sprintf(format, args...))
}

func (s *scanner) ws() {
	b, i := s.b, s.i
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	s.i = i
}

// peek returns the next non-space byte (0 at the end).
func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return s.errorf("want %q", c)
	}
	s.i++
	return nil
}

// object calls field for each key of the object at the scanner; field
// must consume the value.
func (s *scanner) object(field func(key []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		key, _, err := s.rawString()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.errorf("want ',' or '}'")
		}
	}
}

// array calls elem for each element of the array at the scanner.
func (s *scanner) array(elem func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.errorf("want ',' or ']'")
		}
	}
}

// rawString consumes a string and returns its contents between the quotes
// (escapes not decoded) and whether they are plain: printable ASCII with
// no escape, so the contents are the string's value.
func (s *scanner) rawString() (raw []byte, plain bool, err error) {
	if s.peek() != '"' {
		return nil, false, s.errorf("want a string")
	}
	s.i++
	start := s.i
	plain = true
	for s.i < len(s.b) {
		b, i := s.b, s.i // locals: the loop keeps them in registers
		for i < len(b) && plainByte[b[i]] {
			i++
		}
		s.i = i
		if s.i == len(s.b) {
			break
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, plain, nil
		case c < 0x20:
			return nil, false, s.errorf("control character in a string")
		case c == '\\':
			plain = false
			s.i++
			if s.i >= len(s.b) {
				return nil, false, s.errorf("unterminated escape")
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if s.i+5 > len(s.b) {
					return nil, false, s.errorf("short \\u escape")
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return nil, false, s.errorf("bad \\u escape")
					}
				}
				s.i += 5
			default:
				return nil, false, s.errorf("bad escape")
			}
		default:
			if c >= 0x80 {
				plain = false
			}
			s.i++
		}
	}
	return nil, false, s.errorf("unterminated string")
}

// plainByte marks the bytes a string holds as they are: printable ASCII
// but the quote and the backslash.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// str consumes a string or null ("") and returns its value.
func (s *scanner) str() (string, error) { return s.strLike("") }

// strLike is str, but returns prev itself, without allocating, when the
// string is prev: the hits of a page all name the same index.
func (s *scanner) strLike(prev string) (string, error) {
	if s.null() {
		return "", nil
	}
	start := s.i
	raw, plain, err := s.rawString()
	if err != nil {
		return "", err
	}
	if plain {
		if string(raw) == prev {
			return prev, nil
		}
		return string(raw), nil
	}
	var v string // escapes, non-ASCII (invalid UTF-8 becomes U+FFFD)
	if err := json.Unmarshal(s.b[start:s.i], &v); err != nil {
		return "", err
	}
	return v, nil
}

// null consumes a null literal, if there is one.
func (s *scanner) null() bool {
	if s.peek() == 'n' && len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// number consumes a JSON number and returns its text.
func (s *scanner) number() ([]byte, error) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return nil, s.errorf("want a number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return nil, s.errorf("want digits after '.'")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return nil, s.errorf("want digits in the exponent")
		}
	}
	return s.b[start:s.i], nil
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

// int consumes an integer or null (nil). A fraction, an exponent or a
// value beyond int64 is an error, as with encoding/json into an int64.
func (s *scanner) int() (optInt, error) {
	if s.null() {
		return optInt{}, nil
	}
	text, err := s.number()
	if err != nil {
		return optInt{}, err
	}
	if n, ok := smallInt(text); ok {
		return optInt{N: n, Set: true}, nil
	}
	n, err := strconv.ParseInt(string(text), 10, 64)
	if err != nil {
		return optInt{}, fmt.Errorf("number %s: not an int64", text)
	}
	return optInt{N: n, Set: true}, nil
}

// smallInt is the value of a JSON number (as number returns it) of at
// most 18 digits, no fraction and no exponent, which cannot overflow; ok is
// false for anything else (strconv.ParseInt decides).
func smallInt(text []byte) (n int64, ok bool) {
	digits := text
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if len(digits) < len(text) {
		n = -n
	}
	return n, true
}

// boolean consumes true, false or null (false).
func (s *scanner) boolean() (bool, error) {
	s.ws()
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
			s.i += len(lit)
			return lit == "true", nil
		}
	}
	return false, s.errorf("want true or false")
}

// skip consumes any value and returns its bytes.
func (s *scanner) skip(depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, s.errorf("nested too deeply")
	}
	c := s.peek()
	start := s.i
	var err error
	switch {
	case c == '{':
		err = s.object(func([]byte) error { _, err := s.skip(depth + 1); return err })
	case c == '[':
		err = s.array(func() error { _, err := s.skip(depth + 1); return err })
	case c == '"':
		_, _, err = s.rawString()
	case c == '-' || '0' <= c && c <= '9':
		_, err = s.number()
	default:
		ok := false
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
				s.i += len(lit)
				ok = true
				break
			}
		}
		if !ok {
			err = s.errorf("want a value")
		}
	}
	if err != nil {
		return nil, err
	}
	return s.b[start:s.i], nil
}

// parseSearch reads a search response. hits, if not nil, is reused for
// the hits (its backing array, not its contents).
func parseSearch(data []byte, hits []rawHit) (searchResponse, error) {
	r := searchResponse{Hits: hits[:0]}
	s := &scanner{b: data}
	if s.null() {
		return r, s.end()
	}
	err := s.object(func(key []byte) error {
		switch string(key) {
		case "timed_out":
			v, err := s.boolean()
			r.TimedOut = v
			return err
		case "_shards":
			raw, err := s.skip(1)
			if err != nil {
				return err
			}
			r.Shards = shardsHeader{}
			return json.Unmarshal(raw, &r.Shards)
		case "hits":
			r.Hits = r.Hits[:0]
			if s.null() {
				return nil
			}
			return s.object(func(key []byte) error {
				if string(key) != "hits" {
					_, err := s.skip(2)
					return err
				}
				r.Hits = r.Hits[:0]
				if s.null() {
					return nil
				}
				return s.array(func() error {
					r.Hits = append(r.Hits, rawHit{})
					return s.hit(&r.Hits[len(r.Hits)-1])
				})
			})
		}
		_, err := s.skip(1)
		return err
	})
	if err != nil {
		return searchResponse{}, err
	}
	if err := s.end(); err != nil {
		return searchResponse{}, err
	}
	return r, nil
}

func (s *scanner) end() error {
	if s.peek() != 0 || s.i < len(s.b) {
		return s.errorf("data after the top-level value")
	}
	return nil
}

var hitFields = [...]string{"_index", "_id", "_routing", "_seq_no", "_primary_term", "_version", "_source"}

// hitField is the hit field a key names, matched as encoding/json does
// (exactly, else case-insensitively), or "".
func hitField(key []byte) string {
	for _, f := range hitFields {
		if string(key) == f {
			return f
		}
	}
	if lowerASCII(key) {
		// The fields are lowercase ASCII: only an uppercase or a
		// non-ASCII byte (the Kelvin sign folds to k, ſ to s) can fold
		// to one of them.
		return ""
	}
	for _, f := range hitFields {
		if len(key) >= len(f) && bytes.EqualFold(key, []byte(f)) {
			return f
		}
	}
	return ""
}

// lowerASCII reports whether b has no uppercase and no non-ASCII byte.
func lowerASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

// hit reads one hit object (or null: an empty hit).
func (s *scanner) hit(h *rawHit) error {
	if s.null() {
		return nil
	}
	return s.object(func(key []byte) error {
		var err error
		switch hitField(key) {
		case "_index", "_id", "_routing":
			if s.null() {
				return nil // as encoding/json: null leaves a string as it was
			}
			var v string
			if hitField(key) == "_index" {
				v, err = s.strLike(s.index)
			} else {
				v, err = s.str()
			}
			switch hitField(key) {
			case "_index":
				h.Index, s.index = v, v
			case "_id":
				h.ID = v
			default:
				h.Routing = v
			}
		case "_seq_no":
			h.SeqNo, err = s.int()
		case "_primary_term":
			h.PrimaryTerm, err = s.int()
		case "_version":
			h.Version, err = s.int()
		case "_source":
			if s.null() {
				h.Source = nil
				return nil
			}
			h.Source, err = s.skip(4)
		default:
			_, err = s.skip(4)
		}
		return err
	})
}
