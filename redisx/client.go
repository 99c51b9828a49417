package redisx

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrBadURL wraps every reason a Redis URL is refused.
var ErrBadURL = errors.New("bad Redis URL")

// NewClient returns a client for a Redis URL: redis://[user:password@]host:port[/db]
// or rediss:// for TLS. The caller closes it. The error names the URL with
// its password masked.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v (want redis://host:port/db or rediss://…)", ErrBadURL, Redact(rawURL), err)
	}
	switch u.Scheme {
	case "redis", "rediss":
	case "":
		return nil, fmt.Errorf("%w %q: no scheme (want redis://host:port/db or rediss://…)", ErrBadURL, Redact(rawURL))
	default:
		return nil, fmt.Errorf("%w %q: scheme %q is not supported (want redis:// or rediss://)", ErrBadURL, Redact(rawURL), u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w %q: no host (want redis://host:port/db)", ErrBadURL, Redact(rawURL))
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrBadURL, Redact(rawURL), err)
	}
	return redis.NewClient(opt), nil
}

// Redact masks the password of a URL for logs and errors.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		if i := strings.Index(rawURL, "@"); i >= 0 {
			if j := strings.Index(rawURL, "://"); j >= 0 && j < i {
				return rawURL[:j+3] + "xxxxx" + rawURL[i:]
			}
		}
		return rawURL
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
