package urlx

import (
	"net/url"
	"testing"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name, raw, want string
	}{
		{"no user", "redis://localhost:6379/0", "redis://localhost:6379/0"},
		{"user only", "http://elastic@es:9200", "http://elastic@es:9200"},
		{"password", "redis://u:secret@localhost:6379", "redis://u:xxxxx@localhost:6379"},
		{"password only", "rediss://:secret@h:6380/2", "rediss://:xxxxx@h:6380/2"},
		{"https", "https://elastic:changeme@es:9200", "https://elastic:xxxxx@es:9200"},
		{"slash in password", "redis://u:se/cr@et@h:6379", "redis://u:xxxxx@h:6379"},
		{"hash in password", "http://u:a#b@es:9200", "http://u:xxxxx@es:9200"},
		{"scheme-relative, hash after the @", "//:@#@", "//:xxxxx@"},
		{"unparsable", "redis://u:%zz@h", "redis://u:xxxxx@h"},
		{"no scheme", "u:secret@h:6379", "u:xxxxx@h:6379"},
		{"no at", "not a url", "not a url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := Redact(tt.raw), tt.want; got != want {
				t.Errorf("Redact(%q) = %q, want %q", tt.raw, got, want)
			}
		})
	}
}

func TestRedactConn(t *testing.T) {
	tests := []struct {
		name, raw, want string
	}{
		{"url without password", "postgres://u@db:5432/app?sslmode=require", "postgres://u@db:5432/app?sslmode=require"},
		{"url with password", "postgres://u:secret@db/app", "postgres://u:xxxxx@db/app"},
		{"password parameter", "postgresql://u@db/app?password=secret&sslmode=verify-full", "postgresql://u@db/app?password=xxxxx&sslmode=verify-full"},
		{"keyword value", "host=db user=u password=secret dbname=app", "host=db user=u password=xxxxx dbname=app"},
		{"quoted value", `host=db password='se cr\'et' dbname=app`, "host=db password=xxxxx dbname=app"},
		{"spaces around =", "password = secret host=db", "password=xxxxx host=db"},
		{"last pair", "host=db password=secret", "host=db password=xxxxx"},
		{"passfile is not a password", "host=db passfile=/p", "host=db passfile=/p"},
		{"no password", "host=db user=u", "host=db user=u"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := RedactConn(tt.raw), tt.want; got != want {
				t.Errorf("RedactConn(%q) = %q, want %q", tt.raw, got, want)
			}
		})
	}
}

func TestStrayAt(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want bool
	}{
		{"clean", "redis://u:p@h:6379/0", false},
		{"in path", "redis://u@h:6379/a@b", true},
		{"in query", "http://u@es:9200?a@b", true},
		{"in fragment", "http://u@es:9200#a@b", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.raw)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := StrayAt(u), tt.want; got != want {
				t.Errorf("StrayAt(%q) = %v, want %v", tt.raw, got, want)
			}
		})
	}
}
