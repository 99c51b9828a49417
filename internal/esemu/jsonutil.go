package esemu

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// orderedMap is a JSON object that keeps its keys in insertion order, so
// responses print fields in the order Elasticsearch's toXContent does.
type orderedMap struct {
	keys []string
	vals map[string]any
}

func newOrderedMap() *orderedMap { return &orderedMap{vals: map[string]any{}} }

// obj builds an orderedMap from alternating keys and values.
func obj(kvs ...any) *orderedMap {
	m := newOrderedMap()
	for i := 0; i+1 < len(kvs); i += 2 {
		m.set(kvs[i].(string), kvs[i+1])
	}
	return m
}

func (m *orderedMap) set(k string, v any) *orderedMap {
	if _, ok := m.vals[k]; !ok {
		m.keys = append(m.keys, k)
	}
	m.vals[k] = v
	return m
}

func (m *orderedMap) get(k string) (any, bool) {
	v, ok := m.vals[k]
	return v, ok
}

func (m *orderedMap) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if err := m.appendJSON(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// appendJSON writes the object into b. Nested orderedMaps (also inside
// []any) are written in place: going through json.Marshal for each would
// make encoding/json re-validate and re-compact every level's output, which
// dominated the cost of large _bulk responses.
func (m *orderedMap) appendJSON(b *bytes.Buffer) error {
	b.WriteByte('{')
	for i, k := range m.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := marshalJSON(k)
		b.Write(kb)
		b.WriteByte(':')
		if err := appendJSONValue(b, m.vals[k]); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

func appendJSONValue(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case *orderedMap:
		if x == nil {
			b.WriteString("null")
			return nil
		}
		return x.appendJSON(b)
	case []any:
		if x == nil {
			b.WriteString("null")
			return nil
		}
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := appendJSONValue(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	}
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	return nil
}

// marshalJSON is json.Marshal without HTML escaping: Elasticsearch and
// OpenSearch (Jackson) write '<', '>', '&', U+2028 and U+2029 as they are,
// and return a stored _source byte for byte, where json.Marshal would turn
// them into \u003c and the like.
func marshalJSON(v any) ([]byte, error) {
	return marshalJSONIndent(v, "")
}

// marshalJSONIndent is marshalJSON with indentation ("" for none).
func marshalJSONIndent(v any, indent string) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil
}

// decodeJSON decodes into v keeping numbers as json.Number, so long values
// (seq numbers, versions) keep their precision.
func decodeJSON(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	return d.Decode(v)
}

// javaFloat is a float written as Jackson writes a Java float or double:
// always with a fraction or exponent (1.0, 0.0, 2.5, 1.0E7), so that a
// client decoding a score or a histogram key into an integer fails here as
// it fails against Elasticsearch.
type javaFloat float64

func (f javaFloat) MarshalJSON() ([]byte, error) {
	x := float64(f)
	if a := math.Abs(x); x == 0 || (a >= 1e-3 && a < 1e7) {
		s := strconv.FormatFloat(x, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return []byte(s), nil
	}
	mant, exp, _ := strings.Cut(strconv.FormatFloat(x, 'E', -1, 64), "E")
	if !strings.Contains(mant, ".") {
		mant += ".0"
	}
	e, _ := strconv.Atoi(exp)
	return []byte(mant + "E" + strconv.Itoa(e)), nil
}
