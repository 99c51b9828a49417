package cmdflags

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/internal/tlsx"
)

// A cluster's connection flags come in families named by a prefix: "es"
// for the cluster the relay follows (run, resync, status), "bulk" for the
// bulk sink's target (consume). ClusterFlags defines a family, ClusterConn
// reads it: one definition, one reader, for both.

// clusterFlagSuffixes are the flags of a family, after "<prefix>-".
var clusterFlagSuffixes = []string{"user", "password", "password-file", "api-key", "api-key-file",
	"ca-cert", "insecure", "client-cert", "client-key"}

// clusterFlagNames are the names of a family's flags ("es-user", …).
func clusterFlagNames(prefix string) []string {
	out := make([]string, len(clusterFlagSuffixes))
	for i, s := range clusterFlagSuffixes {
		out[i] = prefix + "-" + s
	}
	return out
}

// ClusterFlags defines the TLS and credential flags of a family: prefix
// "es" gives --es-user …, each also read from env + "_USER" … (env
// "ESCF_ES"). what names the cluster in the help ("the cluster").
func ClusterFlags(prefix, env, what string) []cli.Flag {
	str := func(suffix, usage string) cli.Flag {
		return &cli.StringFlag{Name: prefix + "-" + suffix, Usage: usage,
			Sources: cli.EnvVars(env + "_" + strings.ToUpper(strings.ReplaceAll(suffix, "-", "_")))}
	}
	return []cli.Flag{
		str("user", "basic auth user of "+what),
		str("password", "basic auth password (prefer --"+prefix+"-password-file or the environment: a flag shows in ps)"),
		str("password-file", "file holding the basic auth password (one line)"),
		str("api-key", "API key of "+what+": the encoded form (base64 of id:key) or id:key; not with --"+prefix+"-user"),
		str("api-key-file", "file holding the API key (one line)"),
		str("ca-cert", "PEM file of the CA(s) that signed "+what+"'s certificate (default: the system's)"),
		&cli.BoolFlag{Name: prefix + "-insecure", Usage: "do not verify " + what + "'s TLS certificate (logs a warning)",
			Sources: cli.EnvVars(env + "_INSECURE")},
		str("client-cert", "PEM file of a client certificate for "+what+" (mutual TLS; with --"+prefix+"-client-key)"),
		str("client-key", "PEM file of the client certificate's private key"),
	}
}

// ClusterConn reads a family's flags into an es.Config for urls (a user
// may be given in them: https://user@host). Files are read once, here.
// Every error is a usage error naming the flag; none quotes a secret.
func ClusterConn(cmd *cli.Command, prefix string, urls []string) (es.Config, error) {
	flag := func(suffix string) string { return prefix + "-" + suffix }
	cfg := es.Config{URLs: urls}
	var err error
	urlUser := false
	for _, raw := range urls {
		if u, perr := url.Parse(raw); perr == nil && u.User != nil {
			urlUser = true
		}
	}
	cfg.Username = cmd.String(flag("user"))
	if cfg.Password, err = Secret(cmd, flag("password"), flag("password-file")); err != nil {
		return cfg, err
	}
	apiKey, err := Secret(cmd, flag("api-key"), flag("api-key-file"))
	if err != nil {
		return cfg, err
	}
	if apiKey != "" {
		if cfg.Username != "" || cfg.Password != "" || urlUser {
			return cfg, Usagef("--%s and --%s/--%s (or a user in the URL) are two ways to authenticate: pass an API key or a user and password, not both",
				flag("api-key"), flag("user"), flag("password"))
		}
		if cfg.APIKey, err = es.EncodeAPIKey(apiKey); err != nil {
			return cfg, Usagef("--%s: %v", flag("api-key"), err)
		}
	}
	if cfg.Password != "" && cfg.Username == "" && !urlUser {
		return cfg, Usagef("--%s without --%s: pass the user name too (or put it in the URL: https://user@host:9200)", flag("password"), flag("user"))
	}
	caPath, insecure := cmd.String(flag("ca-cert")), cmd.Bool(flag("insecure"))
	if caPath != "" && insecure {
		return cfg, Usagef("--%s and --%s contradict each other: verify the certificate with the CA, or skip verification, not both",
			flag("ca-cert"), flag("insecure"))
	}
	cfg.InsecureSkipVerify = insecure
	if caPath != "" {
		if cfg.CACertPEM, err = flagFile(cmd, flag("ca-cert")); err != nil {
			return cfg, err
		}
		if err := (es.Config{CACertPEM: cfg.CACertPEM}).Validate(); err != nil {
			return cfg, Usagef("--%s %s: no PEM certificate in it (want the CA certificate, -----BEGIN CERTIFICATE-----)", flag("ca-cert"), caPath)
		}
	}
	certPath, keyPath := cmd.String(flag("client-cert")), cmd.String(flag("client-key"))
	if (certPath == "") != (keyPath == "") {
		return cfg, Usagef("--%s and --%s go together: pass the client certificate and its private key", flag("client-cert"), flag("client-key"))
	}
	if certPath != "" {
		if cfg.ClientCertPEM, err = flagFile(cmd, flag("client-cert")); err != nil {
			return cfg, err
		}
		if cfg.ClientKeyPEM, err = flagFile(cmd, flag("client-key")); err != nil {
			return cfg, err
		}
		if err := (es.Config{ClientCertPEM: cfg.ClientCertPEM, ClientKeyPEM: cfg.ClientKeyPEM}).Validate(); err != nil {
			return cfg, Usagef("--%s %s with --%s %s: %v (want PEM files: the certificate, -----BEGIN CERTIFICATE-----, and its private key)",
				flag("client-cert"), certPath, flag("client-key"), keyPath, errors.Unwrap(err))
		}
	}
	return cfg, nil
}

// UsedClusterFlags are the family's flags that are set, for "needs --es"
// checks.
func UsedClusterFlags(cmd *cli.Command, prefix string) []string {
	var out []string
	for _, f := range clusterFlagNames(prefix) {
		if cmd.IsSet(f) {
			out = append(out, f)
		}
	}
	return out
}

// WarnInsecure logs, at WARN, that certificate checks are off.
func WarnInsecure(log *slog.Logger, flag, urls string) {
	log.Warn("TLS certificate verification is off: the connection can be intercepted, anyone on the network path can read and change the traffic (credentials included); use --"+
		strings.TrimSuffix(flag, "-insecure")+"-ca-cert instead",
		logkey.Flag, "--"+flag, logkey.URLs, urls)
}

// authDesc says who a cluster config authenticates as, for messages.
func authDesc(cfg es.Config) string {
	switch {
	case cfg.APIKey != "":
		return "the API key"
	case cfg.Username != "":
		return fmt.Sprintf("user %q", cfg.Username)
	}
	return "no credentials"
}

// ExplainES turns a failed startup call to a cluster into one line a user
// can act on. flag is the URL flag ("es" or "bulk-es"); prefix the prefix
// of its TLS and credential flags ("es" or "bulk"); cfg the config the
// client was built with (for who it authenticated as, never its secrets).
func ExplainES(err error, flag, prefix string, cfg es.Config) error {
	var ee *es.Error
	var te *tlsx.Error
	switch {
	case errors.As(err, &te):
		return explainTLS(err, te, clusterTLSPeer(flag, prefix))
	case errors.Is(err, es.ErrUnauthorized):
		who, check := authDesc(cfg), fmt.Sprintf("--%s-user/--%s-password (or --%s-api-key)", prefix, prefix, prefix)
		if cfg.APIKey != "" {
			check = fmt.Sprintf("--%s-api-key (expired, invalidated, or another cluster's?)", prefix)
		}
		if errors.As(err, &ee) && ee.Status == http.StatusForbidden {
			return fmt.Errorf("Elasticsearch/OpenSearch denied %s (%v): grant it the privileges docs/SECURITY.md lists, or check %s",
				who, err, check)
		}
		return fmt.Errorf("Elasticsearch/OpenSearch refused %s (%v): check %s", who, err, check)
	case errors.Is(err, es.ErrNotFound):
		return fmt.Errorf("%v: check --index (the indices must exist)", err)
	case errors.As(err, &ee) && ee.Status == 0:
		return fmt.Errorf("cannot reach Elasticsearch: %v: check --%s", err, flag)
	}
	return err
}

// ConnectCluster builds the client of the cluster the flags of prefix name
// ("es", "bulk"; urlFlag is the flag of its URLs), says once when its TLS
// certificate is not verified, and asks its root (GET /), so that a bad
// URL, password or certificate stops the command at once with advice
// naming the flags. what starts the log line that says where it connected
// ("" for the relay's source). supported also refuses an engine version
// the relay cannot read.
func ConnectCluster(ctx context.Context, ecfg es.Config, urlFlag, prefix, what string, supported bool, log *slog.Logger) (*es.Client, error) {
	client, err := es.New(ecfg)
	if err != nil {
		return nil, Usagef("--%s: %v", urlFlag, err)
	}
	if ecfg.InsecureSkipVerify {
		WarnInsecure(log, prefix+"-insecure", client.URLs())
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	info, err := client.Info(ictx)
	cancel()
	if err != nil {
		return nil, ExplainES(err, urlFlag, prefix, ecfg)
	}
	if supported {
		if err := info.CheckSupported(); err != nil {
			return nil, fmt.Errorf("%s: %w", client.URLs(), err)
		}
	}
	log.Info(what+"connected to "+info.String(), logkey.Cluster, info.ClusterName, logkey.Distribution, info.Distribution, logkey.Version, info.Version, logkey.URLs, client.URLs())
	return client, nil
}
