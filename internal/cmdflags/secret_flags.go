package cmdflags

import (
	"errors"
	"os"
	"strings"

	"github.com/urfave/cli/v3"
)

// The readers of the files that flags name (passwords, API keys, PEM
// certificates and keys), for every connection's flags: Redis and the
// cluster families alike.

// Secret reads a credential given either as a value (flag or env) or as a
// file (trailing newline trimmed), not both.
func Secret(cmd *cli.Command, valueFlag, fileFlag string) (string, error) {
	v, path := cmd.String(valueFlag), cmd.String(fileFlag)
	if path == "" {
		return v, nil
	}
	if v != "" {
		return "", Usagef("--%s and --%s are both set: give the secret once", valueFlag, fileFlag)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", Usagef("--%s: cannot read %s: %v", fileFlag, path, errors.Unwrap(err))
	}
	s := strings.TrimRight(string(b), "\r\n")
	if strings.TrimSpace(s) == "" {
		return "", Usagef("--%s: %s is empty: write the secret into it (one line)", fileFlag, path)
	}
	if strings.ContainsAny(s, "\r\n") {
		return "", Usagef("--%s: %s has several lines: want the secret alone on one line", fileFlag, path)
	}
	return s, nil
}

// flagFile reads the file a flag names (nil if the flag is not set).
// The error is a usage error naming the flag.
func flagFile(cmd *cli.Command, flag string) ([]byte, error) {
	path := cmd.String(flag)
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, Usagef("--%s: cannot read %s: %v", flag, path, errors.Unwrap(err))
	}
	return b, nil
}
