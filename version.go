package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/urfave/cli/v3"
)

// version is the release this binary was built as, set at build time:
//
//	go build -ldflags "-X main.version=v1.2.0" .
//
// (the Dockerfile passes its VERSION build argument so). Default "dev".
var version = "dev"

// revision is the commit this binary was built from, set at build time
// when Go cannot stamp it itself (-buildvcs=false, as make and the
// Dockerfile build, or no .git in a container's build context):
//
//	go build -ldflags "-X main.revision=$(git rev-parse HEAD)" .
//
// Go's own vcs.revision wins when present. Default "": not known.
var revision = ""

// versionFlag is the root command's --version (urfave/cli's own prints
// only the version, not the build info).
func versionFlag() cli.Flag {
	return &cli.BoolFlag{Name: "version", Usage: "print the version and build info, as the version command does", Local: true}
}

// versionCommand prints the version and build info.
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version and build info (Go version, VCS revision and time)",
		Action: func(_ context.Context, cmd *cli.Command) error {
			return writeVersion(cmd.Root().Writer)
		},
	}
}

// rootAction is what es-changefeed does without a command: --version, or
// the help urfave/cli shows by default (an unknown command is a usage
// error, as without an action).
func rootAction(ctx context.Context, cmd *cli.Command) error {
	if cmd.Bool("version") {
		return writeVersion(cmd.Root().Writer)
	}
	if cmd.Args().Present() {
		return cli.ShowCommandHelp(ctx, cmd, cmd.Args().First())
	}
	return cli.ShowRootCommandHelp(cmd)
}

func writeVersion(w io.Writer) error {
	bi, _ := debug.ReadBuildInfo()
	_, err := io.WriteString(w, versionText(version, revision, bi))
	return err
}

// versionText is the version command's output: the version on the first
// line, then the build info present in bi (nil: none), one "key: value"
// per line. The VCS lines appear when the build stamped them (go build in
// a git checkout without -buildvcs=false); otherwise rev, the revision set
// with -ldflags, is the revision line.
func versionText(v, rev string, bi *debug.BuildInfo) string {
	s := "es-changefeed " + v + "\n"
	if bi == nil {
		if rev != "" {
			s += "revision: " + rev + "\n"
		}
		return s
	}
	settings := map[string]string{}
	for _, kv := range bi.Settings {
		settings[kv.Key] = kv.Value
	}
	if _, ok := settings["vcs.revision"]; !ok && rev != "" {
		settings["vcs.revision"] = rev
	}
	s += fmt.Sprintf("go: %s\n", bi.GoVersion)
	if goos, goarch := settings["GOOS"], settings["GOARCH"]; goos != "" && goarch != "" {
		s += fmt.Sprintf("platform: %s/%s\n", goos, goarch)
	}
	if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		s += fmt.Sprintf("module: %s %s\n", bi.Main.Path, bi.Main.Version)
	}
	for _, k := range []struct{ setting, name string }{
		{"vcs.revision", "revision"},
		{"vcs.time", "time"},
		{"vcs.modified", "modified"},
		{"CGO_ENABLED", "cgo"},
		{"-race", "race"},
	} {
		if val, ok := settings[k.setting]; ok {
			s += fmt.Sprintf("%s: %s\n", k.name, val)
		}
	}
	return s
}
