package tlsx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Problem says what went wrong with TLS.
type Problem int

const (
	// Untrusted: the server's certificate does not verify (unknown
	// authority, another host name, expired).
	Untrusted Problem = iota + 1
	// ClientCertRejected: the server ended the handshake about the
	// client's certificate: it asked for one and got none, or one it does
	// not trust.
	ClientCertRejected
	// NotTLS: a TLS URL whose server answers in plain text.
	NotTLS
	// Required: a plain URL whose server speaks only TLS.
	Required
)

func (p Problem) String() string {
	switch p {
	case Untrusted:
		return "untrusted"
	case ClientCertRejected:
		return "client certificate rejected"
	case NotTLS:
		return "not TLS"
	case Required:
		return "TLS required"
	}
	return fmt.Sprintf("Problem(%d)", int(p))
}

// Error is a connection that failed for TLS reasons.
type Error struct {
	// Peer names the server, passwords masked: "https://es-1:9200" or
	// "Redis at rediss://cache:6380/0".
	Peer    string
	Problem Problem
	// Detail says why in words, e.g. "the certificate expired on …" (may
	// be empty).
	Detail string
	Err    error
}

func (e *Error) Error() string {
	var s string
	switch e.Problem {
	case Untrusted:
		s = "the TLS certificate of " + e.Peer + " is not trusted"
	case ClientCertRejected:
		s = e.Peer + " refused the TLS handshake"
	case NotTLS:
		s = e.Peer + " does not speak TLS"
	case Required:
		s = e.Peer + " closed the connection without an answer, and it speaks TLS"
	default:
		s = "TLS with " + e.Peer
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return fmt.Sprintf("%s (%v)", s, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Client is what Classify needs to know of the client that failed.
type Client struct {
	// Peer names the server (Error.Peer).
	Peer string
	// Noun is how details name the server: "the cluster", "the server".
	Noun string
	// HasClientCert: the client was configured with a certificate of its
	// own.
	HasClientCert bool
}

// Classify returns the *Error err shows, or nil when err is not about TLS:
// Untrusted for a certificate that does not verify (Detail says why),
// ClientCertRejected for a server's alert about the client's certificate
// (Detail says which case), NotTLS for a plain-text answer to a handshake.
// Required is the caller's to find (see Speaks): its symptom, a connection
// closed without a word, has other causes too.
func Classify(err error, c Client) *Error {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var oe *net.OpError
	var rh tls.RecordHeaderError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci):
		return &Error{Peer: c.Peer, Problem: Untrusted, Detail: certProblem(err), Err: err}
	case errors.As(err, &oe) && oe.Op == "remote error" && clientCertAlert(oe.Err):
		return &Error{Peer: c.Peer, Problem: ClientCertRejected, Detail: c.clientCertProblem(oe.Err), Err: err}
	case errors.As(err, &rh):
		return &Error{Peer: c.Peer, Problem: NotTLS, Err: err}
	}
	return nil
}

// Speaks reports whether addr (host:port) completes a TLS handshake within
// 2 s (the certificate not checked: it only tells TLS from plain text).
func Speaks(ctx context.Context, addr, serverName string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, ServerName: serverName}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// certProblem says in words why a server certificate failed verification:
// when it expired, which names it is valid for, who signed it.
func certProblem(err error) string {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	switch {
	case errors.As(err, &ci) && ci.Reason == x509.Expired && ci.Cert != nil:
		now := time.Now().UTC()
		if now.Before(ci.Cert.NotBefore) {
			return fmt.Sprintf("the certificate is not valid yet: valid from %s (check the clocks)", ci.Cert.NotBefore.UTC().Format(time.RFC3339))
		}
		return fmt.Sprintf("the certificate expired on %s", ci.Cert.NotAfter.UTC().Format(time.RFC3339))
	case errors.As(err, &he) && he.Certificate != nil:
		return fmt.Sprintf("the certificate is for %s, not %s", certNames(he.Certificate), he.Host)
	case errors.As(err, &ua):
		if ua.Cert != nil {
			return fmt.Sprintf("the certificate is signed by %q, an authority not among the trusted ones", ua.Cert.Issuer.String())
		}
		return "the certificate is signed by an unknown authority"
	}
	return ""
}

// certNames lists the names and addresses a certificate is valid for.
func certNames(c *x509.Certificate) string {
	var names []string
	names = append(names, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		if c.Subject.CommonName != "" {
			return fmt.Sprintf("no host name (only the legacy common name %q, which is not checked)", c.Subject.CommonName)
		}
		return "no host name at all"
	}
	return strings.Join(names, ", ")
}

// clientCertAlerts are the TLS alerts a server sends about the client's
// certificate, as crypto/tls words them (its alert type is unexported, and
// a remote alert arrives as a *net.OpError with Op "remote error").
var clientCertAlerts = map[string]bool{
	"tls: certificate required":          true, // 116: none sent
	"tls: bad certificate":               true, // 42
	"tls: unsupported certificate":       true, // 43
	"tls: revoked certificate":           true, // 44
	"tls: expired certificate":           true, // 45
	"tls: unknown certificate":           true, // 46
	"tls: unknown certificate authority": true, // 48
}

func clientCertAlert(err error) bool { return err != nil && clientCertAlerts[err.Error()] }

func (c Client) clientCertProblem(alert error) string {
	switch {
	case !c.HasClientCert:
		return c.Noun + " requires a client certificate and none is configured"
	case alert.Error() == "tls: certificate required":
		// Go sends a certificate only if a CA the server named signed it.
		return c.Noun + " requires a client certificate signed by a CA it trusts, and the configured one is not (so none was sent)"
	}
	return fmt.Sprintf("%s refused the client certificate (%v)", c.Noun, alert)
}
