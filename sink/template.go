package sink

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// ErrBadTemplate wraps every reason a key template is refused.
var ErrBadTemplate = errors.New("bad key template")

// A key template placeholder: which event field it stands for.
type tplField uint8

const (
	tplLiteral tplField = iota
	tplIndex
	tplIndexUUID
	tplShard
	tplID
	tplRouting
)

var tplFields = map[string]tplField{
	"index":      tplIndex,
	"index_uuid": tplIndexUUID,
	"shard":      tplShard,
	"id":         tplID,
	"routing":    tplRouting,
}

const tplKnown = "{index}, {index_uuid}, {shard}, {id}, {routing}"

type tplPart struct {
	field tplField
	lit   string // for tplLiteral
}

// KeyTemplate makes a Redis key from an event, e.g. "cache:{index}:{id}"
// gives "cache:orders:42". Placeholders: {index}, {index_uuid}, {shard},
// {id}, {routing} (empty when the document has no custom routing). "{{"
// and "}}" stand for literal braces, which is how a key gets a Redis
// Cluster hash tag: "cache:{{c}}:{index}:{id}" gives "cache:{c}:orders:42".
// Values are inserted as they are, braces included.
type KeyTemplate struct {
	src   string
	parts []tplPart
}

// ParseKeyTemplate parses a key template. The error wraps ErrBadTemplate
// and names every unknown placeholder, or the offset of an unclosed '{' or
// a lone '}'. A template must contain {id}: without it documents would
// share keys.
func ParseKeyTemplate(s string) (KeyTemplate, error) {
	t := KeyTemplate{src: s}
	if s == "" {
		return t, fmt.Errorf("%w: empty (want e.g. \"cache:{index}:{id}\")", ErrBadTemplate)
	}
	var lit strings.Builder
	var unknown []string
	hasID := false
	flush := func() {
		if lit.Len() > 0 {
			t.parts = append(t.parts, tplPart{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '{' && strings.HasPrefix(s[i:], "{{"):
			lit.WriteByte('{')
			i += 2
		case c == '}' && strings.HasPrefix(s[i:], "}}"):
			lit.WriteByte('}')
			i += 2
		case c == '}':
			return t, fmt.Errorf("%w %q: lone '}' at offset %d (write \"}}\" for a literal brace)", ErrBadTemplate, s, i)
		case c == '{':
			j := strings.IndexByte(s[i+1:], '}')
			if j < 0 {
				return t, fmt.Errorf("%w %q: '{' at offset %d is not closed (write \"{{\" for a literal brace)", ErrBadTemplate, s, i)
			}
			name := s[i+1 : i+1+j]
			f, ok := tplFields[name]
			if !ok {
				unknown = append(unknown, strconv.Quote("{"+name+"}"))
			}
			hasID = hasID || f == tplID
			flush()
			t.parts = append(t.parts, tplPart{field: f})
			i += j + 2
		default:
			lit.WriteByte(c)
			i++
		}
	}
	flush()
	if len(unknown) > 0 {
		noun := "placeholder"
		if len(unknown) > 1 {
			noun += "s"
		}
		return t, fmt.Errorf("%w %q: unknown %s %s (known: %s)", ErrBadTemplate, s, noun, strings.Join(unknown, ", "), tplKnown)
	}
	if !hasID {
		return t, fmt.Errorf("%w %q: no {id}: every document would share a key", ErrBadTemplate, s)
	}
	return t, nil
}

// String is the template as parsed.
func (t KeyTemplate) String() string { return t.src }

// Key is the key of the event's document.
func (t KeyTemplate) Key(e redisx.Event) string {
	var b strings.Builder
	for _, p := range t.parts {
		switch p.field {
		case tplLiteral:
			b.WriteString(p.lit)
		case tplIndex:
			b.WriteString(e.Index)
		case tplIndexUUID:
			b.WriteString(e.IndexUUID)
		case tplShard:
			b.WriteString(strconv.Itoa(e.Shard))
		case tplID:
			b.WriteString(e.ID)
		case tplRouting:
			b.WriteString(e.Routing)
		}
	}
	return b.String()
}
