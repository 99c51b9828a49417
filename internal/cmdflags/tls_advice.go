package cmdflags

import (
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/es-changefeed/es-changefeed/internal/tlsx"
)

// tlsPeer is how the advice about a TLS failure (a *tlsx.Error, the same
// for the cluster and Redis) names one connection's flags and server.
type tlsPeer struct {
	urlFlag string // the URL's flag: es, bulk-es, redis, cache-redis
	prefix  string // of its TLS flags: --<prefix>-ca-cert, …
	plain   string // the URL schemes without and with TLS
	secure  string
	server  string // "the cluster", "the server"
	cert    string // the server's certificate, e.g. "the cluster's HTTP certificate"
	caHint  string // where the server's CA is found
	// clientCAs says where the server keeps the CAs it trusts for clients.
	clientCAs string
}

func clusterTLSPeer(urlFlag, prefix string) tlsPeer {
	return tlsPeer{urlFlag: urlFlag, prefix: prefix, plain: "http://", secure: "https://", server: "the cluster",
		cert: "the cluster's HTTP certificate", caHint: "Elasticsearch 8+: config/certs/http_ca.crt", clientCAs: "the cluster trusts for clients"}
}

func redisTLSPeer(prefix string) tlsPeer {
	return tlsPeer{urlFlag: prefix, prefix: prefix, plain: "redis://", secure: "rediss://", server: "the server",
		cert: "the server's certificate", caHint: "Redis: tls-cert-file", clientCAs: "in its tls-ca-cert-file (tls-auth-clients yes)"}
}

// explainTLS adds to err (whose chain holds te) the flag that fixes it.
func explainTLS(err error, te *tlsx.Error, p tlsPeer) error {
	switch te.Problem {
	case tlsx.Untrusted:
		var he x509.HostnameError
		var ci x509.CertificateInvalidError
		switch {
		case errors.As(err, &ci) && ci.Reason == x509.Expired:
			return fmt.Errorf("%v: renew %s (or, if it is not yet valid, fix the clocks)", err, p.cert)
		case errors.As(err, &he):
			return fmt.Errorf("%v: put a name the certificate is valid for in --%s, or reissue the certificate with this one", err, p.urlFlag)
		}
		return fmt.Errorf("%v: pass --%s-ca-cert FILE with the PEM of the CA that signed it (%s), or --%s-insecure to skip verification",
			err, p.prefix, p.caHint, p.prefix)
	case tlsx.NotTLS:
		return fmt.Errorf("%v: use %s in --%s, or enable TLS on %s", err, p.plain, p.urlFlag, p.server)
	case tlsx.Required:
		return fmt.Errorf("%v: use %s in --%s (with --%s-ca-cert if its certificate is self-signed)", err, p.secure, p.urlFlag, p.prefix)
	case tlsx.ClientCertRejected:
		return fmt.Errorf("%v: pass --%s-client-cert FILE and --%s-client-key FILE with a certificate signed by a CA %s",
			err, p.prefix, p.prefix, p.clientCAs)
	}
	return fmt.Errorf("%v: check --%s", err, p.urlFlag)
}
