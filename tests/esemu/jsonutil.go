package esemu

import (
	"bytes"
	"encoding/json"
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
	b.WriteByte('{')
	for i, k := range m.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(m.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// decodeJSON decodes into v keeping numbers as json.Number, so long values
// (seq numbers, versions) keep their precision.
func decodeJSON(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	return d.Decode(v)
}
