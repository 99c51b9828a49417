package main

import (
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressBar returns a callback drawing a progress bar labelled what on w when w is a
// terminal, and nil otherwise (the relay then only logs its progress).
func progressBar(w io.Writer, what string) func(done, total int64) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	var bar *progressbar.ProgressBar
	return func(done, total int64) {
		if bar == nil {
			bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(what),
				progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("docs"),
				progressbar.OptionThrottle(100e6), progressbar.OptionClearOnFinish())
		}
		_ = bar.Set64(done)
	}
}
