package cmdflags

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

func TestSecret(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	one, crlf := file("one", "s3cret\n"), file("crlf", "s3cret\r\n")
	empty, two := file("empty", "\n"), file("two", "a\nb\n")
	tests := []struct {
		name    string
		args    []string
		want    string
		wantErr string
	}{
		{name: "value", args: []string{"--x-password", "v"}, want: "v"},
		{name: "file", args: []string{"--x-password-file", one}, want: "s3cret"},
		{name: "file with CRLF", args: []string{"--x-password-file", crlf}, want: "s3cret"},
		{name: "none", want: ""},
		{name: "both", args: []string{"--x-password", "v", "--x-password-file", one}, wantErr: "--x-password and --x-password-file are both set"},
		{name: "missing", args: []string{"--x-password-file", one + ".gone"}, wantErr: "--x-password-file: cannot read " + one + ".gone"},
		{name: "empty", args: []string{"--x-password-file", empty}, wantErr: "--x-password-file: " + empty + " is empty"},
		{name: "two lines", args: []string{"--x-password-file", two}, wantErr: "has several lines"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got string
			var err error
			cmd := &cli.Command{
				Flags: []cli.Flag{&cli.StringFlag{Name: "x-password"}, &cli.StringFlag{Name: "x-password-file"}},
				Action: func(_ context.Context, cmd *cli.Command) error {
					got, err = Secret(cmd, "x-password", "x-password-file")
					return nil
				},
			}
			if rerr := cmd.Run(t.Context(), append([]string{"t"}, tt.args...)); rerr != nil {
				t.Fatal(rerr)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("secret: error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := got, tt.want; got != want {
				t.Errorf("secret = %q, want %q", got, want)
			}
		})
	}
}
