// Package urlx masks the passwords of URLs (Redis, Elasticsearch, HTTP
// sinks) and of PostgreSQL connection strings for logs and errors: one rule
// for every package that names a URL.
package urlx
