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
// '#' that ended the host early, is masked from after "://" up to its
// last '@'. A URL without a password comes back unchanged.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil || StrayAt(u) {
		if i := strings.LastIndex(raw, "@"); i >= 0 {
			start := 0
			if j := strings.Index(raw, "://"); j >= 0 && j < i {
				start = j + 3
			}
			return raw[:start] + Mask + raw[i:]
		}
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), Mask)
	}
	return u.String()
}
