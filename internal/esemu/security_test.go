package esemu_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/tests/testcert"
)

// TestCluster_Version: Config.Version changes the number GET / reports; an
// OpenSearch flavor reporting 7.x drops version.distribution, as
// OpenSearch's compatibility.override_main_response_version does.
func TestCluster_Version(t *testing.T) {
	tests := []struct {
		name         string
		cfg          esemu.Config
		number, dist string
		tagline      string
	}{
		{"ES pretending to be 7.9.3", esemu.Config{Flavor: esemu.FlavorES7, Version: "7.9.3"}, "7.9.3", "", "You Know, for Search"},
		{"OpenSearch 2 in compatibility mode", esemu.Config{Flavor: esemu.FlavorOpenSearch2, Version: "7.10.2"}, "7.10.2", "", "The OpenSearch Project: https://opensearch.org/"},
		{"OpenSearch 1.0.0", esemu.Config{Flavor: esemu.FlavorOpenSearch2, Version: "1.0.0"}, "1.0.0", "opensearch", "The OpenSearch Project: https://opensearch.org/"},
		{"default", esemu.Config{Flavor: esemu.FlavorOpenSearch3}, esemu.FlavorOpenSearch3.Version(), "opensearch", "The OpenSearch Project: https://opensearch.org/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := esemu.New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			resp, err := http.Get(c.URL() + "/")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var root struct {
				Version map[string]any `json:"version"`
				Tagline string         `json:"tagline"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&root); err != nil {
				t.Fatal(err)
			}
			dist, _ := root.Version["distribution"].(string)
			if got := root.Version["number"]; got != tt.number || dist != tt.dist || root.Tagline != tt.tagline {
				t.Errorf("number %v, distribution %q, tagline %q; want %q, %q, %q", got, dist, root.Tagline, tt.number, tt.dist, tt.tagline)
			}
		})
	}
}

// TestCluster_ClientCertificates: with ClientCAPEM the TLS server requires
// a client certificate from those CAs; Certificate replaces its own.
func TestCluster_ClientCertificates(t *testing.T) {
	serverCA, clientCA := testcert.NewCA(t, "server CA"), testcert.NewCA(t, "client CA")
	serverCert, _, _ := serverCA.Sign(t, testcert.Leaf{})
	clientCert, _, _ := clientCA.Sign(t, testcert.Leaf{Client: true})
	c, err := esemu.New(esemu.Config{TLS: true, Certificate: &serverCert, ClientCAPEM: clientCA.PEM()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if c.CACertPEM() != nil {
		t.Errorf("CACertPEM is set with a caller's certificate")
	}
	get := func(certs []tls.Certificate) error {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(serverCA.PEM())
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}}}
		defer cl.CloseIdleConnections()
		resp, err := cl.Get(c.URL() + "/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	if err := get([]tls.Certificate{clientCert}); err != nil {
		t.Errorf("with the client certificate: %v", err)
	}
	if err := get(nil); err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("without a client certificate: %v, want certificate required", err)
	}
	for _, cfg := range []esemu.Config{{Certificate: &serverCert}, {ClientCAPEM: clientCA.PEM()}, {TLS: true, ClientCAPEM: []byte("x")}} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", cfg)
		}
	}
}
