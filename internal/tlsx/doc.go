// Package tlsx is the one vocabulary of TLS failures for every client of
// the project (the Elasticsearch client in es, Redis in redisx): what went
// wrong (Problem), said in words by one Error type, found from crypto/tls's
// and crypto/x509's errors by Classify. The CLI turns a Problem into the
// flags to fix, the same way for both.
package tlsx
