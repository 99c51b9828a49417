package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// fileEvent is an upsert of document id at seq whose JSON line is padded
// by pad bytes of source.
func fileEvent(id string, seq int64, pad int) redisx.Event {
	return redisx.Event{Op: redisx.OpUpsert, Index: "orders", IndexUUID: "U1", Shard: 0, ID: id, SeqNo: seq,
		PrimaryTerm: 1, Version: 1, Source: json.RawMessage(`{"pad":"` + strings.Repeat("x", pad) + `"}`)}
}

// fileLine is the line File writes for e.
func fileLine(tb testing.TB, e redisx.Event) string {
	tb.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b) + "\n"
}

// fileRead returns a file's content, "" when it does not exist.
func fileRead(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func TestFileConfig_Validate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     FileConfig
		wantErr string // "" = valid
	}{
		{name: "defaults", cfg: FileConfig{Path: "x"}},
		{name: "no path", cfg: FileConfig{}, wantErr: "Path"},
		{name: "negative MaxBytes", cfg: FileConfig{Path: "x", MaxBytes: -1}, wantErr: "MaxBytes = -1"},
		{name: "negative Keep", cfg: FileConfig{Path: "x", Keep: -2}, wantErr: "Keep = -2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
			}
		})
	}
}

func TestFile_Content(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(path, []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := NewFile(FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	events := []redisx.Event{fileEvent("a", 0, 0), {Op: redisx.OpDelete, Index: "orders", IndexUUID: "U1", ID: "a", SeqNo: 0}, fileEvent("b", 3, 2)}
	want := "kept\n"
	for _, e := range events {
		if err := s.Handler()(context.Background(), e); err != nil {
			t.Fatal(err)
		}
		want += fileLine(t, e)
		// The handler returned: the line is in the file.
		if got := fileRead(t, path); got != want {
			t.Fatalf("got  %q\nwant %q", got, want)
		}
	}
	if !strings.Contains(want, `"seq_no":0`) {
		t.Fatal("the test lost its seq_no 0 line")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestFile_GroupCommit holds the first fsync and checks that handlers
// queued meanwhile do not return before their own fsync, and share one:
// each handler notes, when it returns, how many fsyncs had completed.
func TestFile_GroupCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	s, err := NewFile(FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	var syncs, synced atomic.Int32
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	s.syncFile = func(f *os.File) error {
		if syncs.Add(1) == 1 {
			entered <- struct{}{}
			<-release
		}
		err := f.Sync()
		synced.Add(1)
		return err
	}
	h := s.Handler()
	const n = 20
	results := make(chan error, n+1)
	type returned struct {
		name   string
		synced int32 // fsyncs completed when its handler returned
		want   int32 // the fsync of its line
	}
	returns := make(chan returned, n+1)
	handle := func(name string, seqNo int64, want int32) {
		err := h(context.Background(), fileEvent(name, seqNo, 0))
		returns <- returned{name: name, synced: synced.Load(), want: want}
		results <- err
	}
	go handle("first", 0, 1)
	<-entered // the first batch is in its fsync
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			handle(strconv.Itoa(i), int64(i+1), 2)
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.gc.mu.Lock()
		queued := len(s.gc.pending)
		s.gc.mu.Unlock()
		if queued == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d handlers queued within 30s, want %d", queued, n)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for range n + 1 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	for range n + 1 {
		if r := <-returns; r.synced < r.want {
			t.Errorf("the handler of %s returned after %d fsyncs, before the fsync of its line (fsync %d)", r.name, r.synced, r.want)
		}
	}
	if got, want := syncs.Load(), int32(2); got != want {
		t.Errorf("%d fsyncs for %d events, want %d (one alone, then one for the rest)", got, n+1, want)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(fileRead(t, path), "\n"); got != n+1 {
		t.Errorf("%d lines, want %d", got, n+1)
	}
}

func TestFile_Rotation(t *testing.T) {
	line := fileLine(t, fileEvent("00", 0, 20))
	lineLen := int64(len(line)) // every event below renders to this length
	tests := []struct {
		name     string
		events   int
		maxBytes int64
		keep     int
		want     []int // lines in path, path.1, path.2, ...
	}{
		{name: "no rotation below the limit", events: 3, maxBytes: 3 * lineLen, keep: 2, want: []int{3}},
		{name: "rotates at the limit", events: 4, maxBytes: 3 * lineLen, keep: 2, want: []int{1, 3}},
		{name: "keeps Keep files", events: 10, maxBytes: 2 * lineLen, keep: 2, want: []int{2, 2, 2}},
		{name: "a line longer than MaxBytes gets a file of its own", events: 3, maxBytes: lineLen / 2, keep: 5, want: []int{1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.jsonl")
			s, err := NewFile(FileConfig{Path: path, MaxBytes: tt.maxBytes, Keep: tt.keep})
			if err != nil {
				t.Fatal(err)
			}
			var all []string
			for i := range tt.events {
				e := fileEvent(fmt.Sprintf("%02d", i), int64(i), 20)
				all = append(all, fileLine(t, e))
				if err := s.Handler()(context.Background(), e); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			// Newest file first; read back oldest first to compare.
			var got []int
			var content string
			for i := 0; ; i++ {
				p := path
				if i > 0 {
					p = path + "." + strconv.Itoa(i)
				}
				c := fileRead(t, p)
				if c == "" {
					break
				}
				if int64(len(c)) > tt.maxBytes && strings.Count(c, "\n") > 1 {
					t.Errorf("%s is %d bytes, over MaxBytes %d", p, len(c), tt.maxBytes)
				}
				got = append(got, strings.Count(c, "\n"))
				content = c + content
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("lines per file (newest first) = %v, want %v", got, tt.want)
			}
			kept := 0
			for _, n := range tt.want {
				kept += n
			}
			if want := strings.Join(all[len(all)-kept:], ""); content != want {
				t.Errorf("content of the files, oldest first:\n%s\nwant the last %d lines:\n%s", content, kept, want)
			}
			if _, err := os.Stat(path + "." + strconv.Itoa(tt.keep+1)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s.%d exists, want at most Keep=%d rotated files", path, tt.keep+1, tt.keep)
			}
		})
	}
}

// TestFile_RotationInOneBatch checks that one group-commit batch may span
// a rotation.
func TestFile_RotationInOneBatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	lineLen := int64(len(fileLine(t, fileEvent("00", 0, 20))))
	s, err := NewFile(FileConfig{Path: path, MaxBytes: 2 * lineLen, Keep: 3})
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	for i := range 5 {
		lines = append(lines, []byte(fileLine(t, fileEvent(fmt.Sprintf("%02d", i), int64(i), 20))))
	}
	if err := s.gc.close(context.Background()); err != nil { // stop the goroutine; call write directly
		t.Fatal(err)
	}
	if err := s.write(context.Background(), lines); err != nil {
		t.Fatal(err)
	}
	s.f.Close()
	got := []int{strings.Count(fileRead(t, path), "\n"), strings.Count(fileRead(t, path+".1"), "\n"), strings.Count(fileRead(t, path+".2"), "\n")}
	if fmt.Sprint(got) != "[1 2 2]" {
		t.Errorf("lines per file = %v, want [1 2 2]", got)
	}
}
