package urlx

import (
	"net/url"
	"strings"
)

// Mask is what stands in place of a password.
const Mask = "xxxxx"

// StrayAt reports whether an '@' follows the host: a password with an
// unescaped '/', '?' or '#' ended the host early, and what follows is
// read as path, query or fragment.
func StrayAt(u *url.URL) bool {
	return strings.Contains(u.EscapedPath()+u.RawQuery+u.EscapedFragment()+u.Opaque, "@")
}

// Redact returns raw with its password replaced by Mask. A URL that does
// not parse, has no "scheme://", or whose password holds a '/', '?' or
// '#' that ended the host early, is masked from after "://" (or a leading
// "//") up to its last '@', but for the user name before the first ':'
// (a user name holds no ':'; the password is all after it). A URL without
// a password comes back unchanged.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil || StrayAt(u) {
		if i := strings.LastIndex(raw, "@"); i >= 0 {
			start := 0
			if j := strings.Index(raw, "://"); j >= 0 && j < i {
				start = j + 3
			} else if strings.HasPrefix(raw, "//") {
				start = 2
			}
			user := ""
			if k := strings.IndexByte(raw[start:i], ':'); k >= 0 {
				user = raw[start : start+k+1]
			}
			return raw[:start] + user + Mask + raw[i:]
		}
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), Mask)
	}
	return u.String()
}

// RedactConn masks the password of a PostgreSQL connection string in
// either of libpq's forms: a URL (postgres://user:password@host/db, and a
// password=… query parameter) or keyword/value pairs (host=h
// password='p q'). Anything else is masked as Redact does.
func RedactConn(conn string) string {
	if strings.Contains(conn, "://") {
		s := Redact(conn)
		u, err := url.Parse(s)
		if err != nil || !u.Query().Has("password") {
			return s
		}
		q := u.Query()
		q.Set("password", Mask)
		u.RawQuery = q.Encode()
		return u.String()
	}
	var b strings.Builder
	rest := conn
	for {
		i := keywordAt(rest, "password")
		if i < 0 {
			b.WriteString(rest)
			return b.String()
		}
		b.WriteString(rest[:i])
		rest = rest[i+len("password"):]
		j := 0
		for j < len(rest) && rest[j] == ' ' {
			j++
		}
		if j == len(rest) || rest[j] != '=' {
			b.WriteString("password")
			continue
		}
		j++
		for j < len(rest) && rest[j] == ' ' {
			j++
		}
		b.WriteString("password=" + Mask)
		rest = rest[j:]
		if strings.HasPrefix(rest, "'") {
			// A quoted value ends at the next quote not escaped by '\'.
			k := 1
			for k < len(rest) && rest[k] != '\'' {
				if rest[k] == '\\' {
					k++
				}
				k++
			}
			rest = rest[min(k+1, len(rest)):]
		} else if k := strings.IndexAny(rest, " \t\n"); k >= 0 {
			rest = rest[k:]
		} else {
			rest = ""
		}
	}
}

// keywordAt is the index of keyword in a keyword/value string where it
// starts a pair (at the start or after whitespace), -1 if none.
func keywordAt(s, keyword string) int {
	for off := 0; ; {
		i := strings.Index(s[off:], keyword)
		if i < 0 {
			return -1
		}
		i += off
		if i == 0 || strings.ContainsRune(" \t\n", rune(s[i-1])) {
			return i
		}
		off = i + 1
	}
}
