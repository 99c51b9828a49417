package tlsx

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestClassify: each failure a client meets is one Problem, said in the
// same words whichever client met it.
func TestClassify(t *testing.T) {
	expired := &x509.Certificate{NotBefore: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2025, 6, 30, 0, 0, 0, 0, time.UTC)}
	host := &x509.Certificate{DNSNames: []string{"es.example.internal"}, IPAddresses: []net.IP{net.ParseIP("10.9.8.7")}}
	signer := &x509.Certificate{Issuer: pkix.Name{CommonName: "test CA"}}
	alert := func(text string) error { return &net.OpError{Op: "remote error", Net: "tcp", Err: errors.New(text)} }
	es := Client{Peer: "https://es:9200", Noun: "the cluster"}
	withCert := Client{Peer: "Redis at rediss://r:6380/0", Noun: "the server", HasClientCert: true}
	tests := []struct {
		name   string
		err    error
		client Client
		want   Problem // 0: not about TLS
		text   string
	}{
		{name: "expired", err: fmt.Errorf("get: %w", x509.CertificateInvalidError{Cert: expired, Reason: x509.Expired}), client: es,
			want: Untrusted, text: "the TLS certificate of https://es:9200 is not trusted: the certificate expired on 2025-06-30T00:00:00Z ("},
		{name: "another host", err: x509.HostnameError{Certificate: host, Host: "127.0.0.1"}, client: es,
			want: Untrusted, text: "is not trusted: the certificate is for es.example.internal, 10.9.8.7, not 127.0.0.1"},
		{name: "unknown authority", err: x509.UnknownAuthorityError{Cert: signer}, client: withCert,
			want: Untrusted, text: `the TLS certificate of Redis at rediss://r:6380/0 is not trusted: the certificate is signed by "CN=test CA"`},
		{name: "no client certificate", err: alert("tls: certificate required"), client: es,
			want: ClientCertRejected, text: "https://es:9200 refused the TLS handshake: the cluster requires a client certificate and none is configured"},
		{name: "client certificate not sent", err: alert("tls: certificate required"), client: withCert,
			want: ClientCertRejected, text: "the server requires a client certificate signed by a CA it trusts, and the configured one is not"},
		{name: "client certificate refused", err: alert("tls: expired certificate"), client: withCert,
			want: ClientCertRejected, text: "the server refused the client certificate (tls: expired certificate)"},
		{name: "another alert", err: alert("tls: protocol version not supported"), client: es},
		{name: "plain text", err: tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, client: es,
			want: NotTLS, text: "https://es:9200 does not speak TLS (tls: first record"},
		{name: "EOF", err: io.EOF, client: es},
		{name: "nil", client: es},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(tt.err, tt.client)
			switch {
			case tt.want == 0 && got != nil:
				t.Fatalf("Classify(%v) = %v, want nil", tt.err, got)
			case tt.want == 0:
				return
			case got == nil || got.Problem != tt.want:
				t.Fatalf("Classify(%v) = %#v, want problem %v", tt.err, got, tt.want)
			}
			if msg := got.Error(); !strings.Contains(msg, tt.text) {
				t.Errorf("message %q, want it to contain %q", msg, tt.text)
			}
			if !errors.Is(got, tt.err) {
				t.Errorf("the error does not unwrap to %v", tt.err)
			}
		})
	}
}
