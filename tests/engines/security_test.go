package engines

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// TestNewCredentials: the files a client needs are written (owner-only),
// the node certificate is valid for 127.0.0.1 under the CA, the client
// certificate names ClientCertUser, and each password matches its hash.
func TestNewCredentials(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sec")
	cr, err := newCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{FileCA, FileClientCert, FileClientKey}
	for _, u := range Users() {
		want = append(want, PasswordFile(u))
	}
	for _, name := range want {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	if got, want := PasswordFile(UserRelay), "relay.password"; got != want {
		t.Errorf("PasswordFile(%s) = %s, want %s", UserRelay, got, want)
	}
	block, _ := pem.Decode(cr.nodePEM)
	node, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.Verify(x509.VerifyOptions{Roots: cr.pool, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("node certificate for 127.0.0.1: %v", err)
	}
	if _, err := node.Verify(x509.VerifyOptions{Roots: cr.pool, DNSName: "es.example.com"}); err == nil {
		t.Error("node certificate verifies for es.example.com too")
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, FileClientCert), filepath.Join(dir, FileClientKey))
	if err != nil {
		t.Fatal(err)
	}
	client, _ := x509.ParseCertificate(pair.Certificate[0])
	if got := client.Subject.String(); got != "CN="+ClientCertUser {
		t.Errorf("client certificate subject %s, want CN=%s", got, ClientCertUser)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: cr.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	for _, u := range Users() {
		b, _ := os.ReadFile(filepath.Join(dir, PasswordFile(u)))
		pw := strings.TrimSuffix(string(b), "\n")
		if pw == "" || pw != cr.passwords[u] {
			t.Errorf("%s: file holds %q, want the password", u, pw)
		}
		if err := bcrypt.CompareHashAndPassword([]byte(cr.hashes[u]), []byte(pw)); err != nil {
			t.Errorf("%s: hash: %v", u, err)
		}
	}
}

func TestArtifactName(t *testing.T) {
	for _, tc := range []struct{ jar, want string }{
		{"netty-codec-4.1.125.Final.jar", "netty-codec"},
		{"transport-netty4-client-2.19.4.jar", "transport-netty4-client"},
		{"guava-33.4.0-jre.jar", "guava"},
		{"scala-java8-compat_3-1.0.2.jar", "scala-java8-compat_3"},
		{"bcprov-jdk18on-1.82.jar", "bcprov-jdk18on"},
		{"plain.jar", "plain"},
	} {
		if got := artifactName(tc.jar); got != tc.want {
			t.Errorf("artifactName(%s) = %s, want %s", tc.jar, got, tc.want)
		}
	}
}
