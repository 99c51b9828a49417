package es

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/tlsx"
	"github.com/es-changefeed/es-changefeed/tests/testcert"
)

func TestEncodeAPIKey(t *testing.T) {
	enc := base64.StdEncoding.EncodeToString([]byte("VuaCfGcBCdbkQm-e5aOx:ui2lp2axTNmsyakw9tvNnw"))
	tests := []struct {
		name, in, want string
		bad            bool
	}{
		{name: "encoded form", in: enc, want: enc},
		{name: "encoded form with a newline", in: enc + "\n", want: enc},
		{name: "id:key", in: "VuaCfGcBCdbkQm-e5aOx:ui2lp2axTNmsyakw9tvNnw", want: enc},
		{name: "empty", in: " ", bad: true},
		{name: "no colon, not base64", in: "not-a-key-at-all!", bad: true},
		{name: "base64 without a colon", in: base64.StdEncoding.EncodeToString([]byte("secretsecret")), bad: true},
		{name: "empty id", in: ":secretsecret", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EncodeAPIKey(tt.in)
			if tt.bad {
				if err == nil {
					t.Fatalf("EncodeAPIKey(%q) = %q, want an error", tt.in, got)
				}
				if strings.Contains(err.Error(), "secretsecret") || strings.Contains(err.Error(), strings.TrimSpace(tt.in)) && len(strings.TrimSpace(tt.in)) > 0 {
					t.Errorf("the error quotes the key: %v", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("EncodeAPIKey(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
	t.Run("config", func(t *testing.T) {
		if err := (Config{APIKey: enc, Username: "elastic"}).Validate(); err == nil {
			t.Error("APIKey with Username accepted")
		}
		if err := (Config{APIKey: "garbage"}).Validate(); err == nil {
			t.Error("a malformed APIKey accepted")
		}
	})
}

// TestClient_Info_Versions: the distribution and version come from GET /,
// including OpenSearch's compatibility mode (version 7.10.2, distribution
// dropped, or kept by OpenSearch 1.0's first take on it); old versions are
// refused with the version found and the minimum.
func TestClient_Info_Versions(t *testing.T) {
	const osTag = `"tagline":"The OpenSearch Project: https://opensearch.org/"`
	const esTag = `"tagline":"You Know, for Search"`
	tests := []struct {
		name    string
		body    string
		str     string // Info.String()
		listing string
		refused string // "" = supported; else a part of the error
	}{
		{"ES 8", `{"cluster_name":"c","version":{"number":"8.19.2","build_flavor":"default"},` + esTag + `}`, "Elasticsearch 8.19.2", ListingPIT, ""},
		{"ES 7.10.0", `{"version":{"number":"7.10.0","build_flavor":"default"},` + esTag + `}`, "Elasticsearch 7.10.0", ListingPIT, ""},
		{"ES 7.10.2 OSS build", `{"version":{"number":"7.10.2","build_flavor":"oss"},` + esTag + `}`, "Elasticsearch 7.10.2", ListingScroll, ""},
		{"ES 7.9.3", `{"version":{"number":"7.9.3","build_flavor":"default"},` + esTag + `}`, "Elasticsearch 7.9.3", ListingScroll,
			"the cluster is Elasticsearch 7.9.3, and es-changefeed needs Elasticsearch 7.10.0 or later"},
		{"ES 6.8.23", `{"version":{"number":"6.8.23","build_flavor":"default"},` + esTag + `}`, "Elasticsearch 6.8.23", ListingScroll, "Elasticsearch 6.8.23"},
		{"ES 8 release candidate", `{"version":{"number":"8.0.0-rc1"},` + esTag + `}`, "Elasticsearch 8.0.0-rc1", ListingPIT, ""},
		{"OpenSearch 2.19", `{"version":{"distribution":"opensearch","number":"2.19.7"},` + osTag + `}`, "OpenSearch 2.19.7", ListingPIT, ""},
		{"OpenSearch 1.0.0", `{"version":{"distribution":"opensearch","number":"1.0.0"},` + osTag + `}`, "OpenSearch 1.0.0", ListingScroll, ""},
		{"OpenSearch 1.0 beta", `{"version":{"distribution":"opensearch","number":"1.0.0-beta1"},` + osTag + `}`, "OpenSearch 1.0.0-beta1", ListingScroll, ""},
		{"OpenSearch 0.x (never released; refused)", `{"version":{"distribution":"opensearch","number":"0.9.0"}}`, "OpenSearch 0.9.0", ListingScroll,
			"the cluster is OpenSearch 0.9.0, and es-changefeed needs OpenSearch 1.0.0 or later"},
		{"OpenSearch compatibility mode", `{"version":{"number":"7.10.2","build_type":"tar"},` + osTag + `}`,
			"OpenSearch (compatibility mode: reports version 7.10.2)", ListingScroll, ""},
		{"OpenSearch compatibility mode keeping the distribution", `{"version":{"distribution":"opensearch","number":"7.10.2"},` + osTag + `}`,
			"OpenSearch (compatibility mode: reports version 7.10.2)", ListingScroll, ""},
		{"Amazon OpenSearch Service compatibility mode without tagline", `{"version":{"number":"7.10.2","build_type":"tar"}}`,
			"OpenSearch (compatibility mode: reports version 7.10.2)", ListingScroll, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := canned(t, 200, tt.body)
			info, err := c.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := info.String(); got != tt.str {
				t.Errorf("String() = %q, want %q", got, tt.str)
			}
			if got := c.listingMethod(); got != tt.listing {
				t.Errorf("listing = %q, want %q", got, tt.listing)
			}
			err = info.CheckSupported()
			switch {
			case tt.refused == "" && err != nil:
				t.Errorf("CheckSupported = %v, want nil", err)
			case tt.refused != "" && (!errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), tt.refused)):
				t.Errorf("CheckSupported = %v, want ErrUnsupportedVersion saying %q", err, tt.refused)
			}
		})
	}
}

// TestClient_TLSCertificateProblems: an expired or wrong-host server
// certificate and a refused client certificate each give a *tlsx.Error that
// says why in words; a good client certificate and an API key get through.
func TestClient_TLSCertificateProblems(t *testing.T) {
	ca := testcert.NewCA(t, "test CA")
	clientCA := testcert.NewCA(t, "client CA")
	otherCA := testcert.NewCA(t, "other CA")
	expiredAt := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	expired, _, _ := ca.Sign(t, testcert.Leaf{NotBefore: expiredAt.Add(-48 * time.Hour), NotAfter: expiredAt})
	wrongHost, _, _ := ca.Sign(t, testcert.Leaf{Hosts: []string{"es.example.internal", "10.9.8.7"}})
	good, _, _ := ca.Sign(t, testcert.Leaf{})
	_, clientPEM, clientKey := clientCA.Sign(t, testcert.Leaf{Client: true})
	_, strangerPEM, strangerKey := otherCA.Sign(t, testcert.Leaf{Client: true})
	_, oldPEM, oldKey := clientCA.Sign(t, testcert.Leaf{Client: true, NotBefore: expiredAt.Add(-time.Hour), NotAfter: expiredAt})
	var gotAuth string
	serve := func(cert tls.Certificate, clientCAs []byte) string {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			gotAuth = r.Header.Get("Authorization")
			_, _ = w.Write([]byte(`{"version":{"number":"9.0.0"}}`))
		}))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		if clientCAs != nil {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(clientCAs)
			srv.TLS.ClientCAs, srv.TLS.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.URL
	}
	mtls := serve(good, clientCA.PEM())
	tests := []struct {
		name    string
		cfg     Config
		problem tlsx.Problem // 0: success
		says    []string
	}{
		{"expired", Config{URLs: []string{serve(expired, nil)}}, tlsx.Untrusted, []string{"the certificate expired on 2024-03-01T12:00:00Z"}},
		{"wrong host", Config{URLs: []string{serve(wrongHost, nil)}}, tlsx.Untrusted, []string{"the certificate is for es.example.internal, 10.9.8.7, not 127.0.0.1"}},
		{"unknown CA", Config{URLs: []string{serve(good, nil)}, CACertPEM: otherCA.PEM()}, tlsx.Untrusted, []string{`signed by "CN=test CA"`}},
		{"no client certificate", Config{URLs: []string{mtls}}, tlsx.ClientCertRejected, []string{"requires a client certificate and none is configured"}},
		{"client certificate of another CA", Config{URLs: []string{mtls}, ClientCertPEM: strangerPEM, ClientKeyPEM: strangerKey}, tlsx.ClientCertRejected,
			[]string{"signed by a CA it trusts, and the configured one is not"}},
		{"expired client certificate", Config{URLs: []string{mtls}, ClientCertPEM: oldPEM, ClientKeyPEM: oldKey}, tlsx.ClientCertRejected,
			[]string{"the cluster refused the client certificate (tls: expired certificate)"}},
		{"client certificate", Config{URLs: []string{mtls}, ClientCertPEM: clientPEM, ClientKeyPEM: clientKey}, 0, nil},
		{"API key", Config{URLs: []string{mtls}, ClientCertPEM: clientPEM, ClientKeyPEM: clientKey, APIKey: "id1:key1"}, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cfg.CACertPEM == nil {
				tt.cfg.CACertPEM = ca.PEM()
			}
			gotAuth = ""
			err := infoTLSProblem(t, tt.cfg, tt.problem)
			for _, s := range tt.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if tt.cfg.APIKey != "" {
				if want := "ApiKey " + base64.StdEncoding.EncodeToString([]byte(tt.cfg.APIKey)); gotAuth != want {
					t.Errorf("Authorization = %q, want %q", gotAuth, want)
				}
			}
		})
	}
	t.Run("config", func(t *testing.T) {
		for _, cfg := range []Config{
			{ClientCertPEM: clientPEM},
			{ClientKeyPEM: clientKey},
			{ClientCertPEM: clientPEM, ClientKeyPEM: strangerKey},
			{ClientCertPEM: []byte("x"), ClientKeyPEM: []byte("y")},
		} {
			if err := cfg.Validate(); err == nil {
				t.Errorf("Validate(%+v) = nil, want an error", cfg)
			}
		}
	})
}

// infoTLSProblem calls Info with cfg and wants success (problem 0) or a
// *tlsx.Error with that problem, which it returns.
func infoTLSProblem(tb testing.TB, cfg Config, problem tlsx.Problem) error {
	tb.Helper()
	c, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	_, err = c.Info(context.Background())
	var te *tlsx.Error
	switch {
	case problem == 0 && err != nil:
		tb.Fatalf("Info = %v", err)
	case problem != 0 && (!errors.As(err, &te) || te.Problem != problem):
		tb.Fatalf("Info = %v, want a *tlsx.Error with problem %v", err, problem)
	}
	return err
}
