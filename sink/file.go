package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// Defaults of FileConfig.
const (
	DefaultFileMaxBytes int64 = 100 << 20 // 100 MiB
	DefaultFileKeep           = 5
)

// FileConfig configures a File sink.
type FileConfig struct {
	// Path is the file the lines are appended to. Required. It is created
	// (mode 0644) if missing; its directory must exist.
	Path string
	// MaxBytes is the size past which the file is rotated. Default 100 MiB
	// (DefaultFileMaxBytes). Rotation happens between lines: a file only
	// grows past MaxBytes when a single line is longer than that.
	MaxBytes int64
	// Keep is how many rotated files are kept: Path.1 (the newest) up to
	// Path.<Keep>; older ones are removed. Default 5 (DefaultFileKeep).
	Keep int
	// PositionsPath is the file where the sink records how far it applied
	// each stream for each group (redisx.Positions), a JSON object
	// "<stream>|<group>" -> {"lead","low"}, replaced atomically (written
	// aside, fsynced, renamed). Default Path + ".applied".
	PositionsPath string
}

// Validate names the first bad field.
func (c FileConfig) Validate() error {
	if c.Path == "" {
		return errors.New("file sink config: Path is empty")
	}
	if c.MaxBytes < 0 {
		return fmt.Errorf("file sink config: MaxBytes = %d: want 0 (default %d) or more", c.MaxBytes, DefaultFileMaxBytes)
	}
	if c.Keep < 0 {
		return fmt.Errorf("file sink config: Keep = %d: want 0 (default %d) or more", c.Keep, DefaultFileKeep)
	}
	return nil
}

// File appends each event as one JSON line (the Stdout form) to a file and
// fsyncs it before the handler returns, with group commit: one goroutine
// writes every line pending, fsyncs once, then releases all their
// handlers. When the file would grow past MaxBytes it is rotated: Path.N-1
// becomes Path.N, ..., Path becomes Path.1, and a new Path is started.
type File struct {
	cfg FileConfig
	gc  *groupCommit[[]byte]

	// Owned by the group-commit goroutine (and Close after it stopped).
	f        *os.File
	size     int64
	syncFile func(*os.File) error // (*os.File).Sync; tests count calls

	posMu sync.Mutex
	pos   map[string]redisx.Position // PositionsPath as last read or written; nil: not read yet
}

// NewFile opens (or creates) the file and starts the writer goroutine.
func NewFile(cfg FileConfig) (*File, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultFileMaxBytes
	}
	if cfg.Keep == 0 {
		cfg.Keep = DefaultFileKeep
	}
	if cfg.PositionsPath == "" {
		cfg.PositionsPath = cfg.Path + ".applied"
	}
	s := &File{cfg: cfg, syncFile: (*os.File).Sync}
	if err := s.open(); err != nil {
		return nil, err
	}
	s.gc = newGroupCommit(0, 0, s.write)
	return s, nil
}

// Handler appends the event's line and returns once it is fsynced. Write,
// sync and rotation errors are returned to every handler of the batch
// (retryable); the lines of a failed batch are cut off the file again when
// possible.
func (s *File) Handler() redisx.Handler {
	return func(ctx context.Context, e redisx.Event) error {
		line, err := jsonLine(e)
		if err != nil {
			return err
		}
		return s.gc.submit(ctx, line)
	}
}

// Close writes and syncs what is pending, then closes the file. Later
// handler calls return ErrClosed.
func (s *File) Close(ctx context.Context) error {
	err := s.gc.close(ctx)
	if s.f != nil {
		if cerr := s.f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("file sink: close %s: %w", s.cfg.Path, cerr)
		}
		s.f = nil
	}
	return err
}

func (s *File) open() error {
	f, err := os.OpenFile(s.cfg.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("file sink: open: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("file sink: stat: %w", err)
	}
	s.f, s.size = f, st.Size()
	return nil
}

// write appends one batch of lines, rotating between lines when needed,
// and syncs. It runs on the group-commit goroutine only.
func (s *File) write(_ context.Context, lines [][]byte) error {
	if s.f == nil { // a rotation failed to reopen: try again
		if err := s.open(); err != nil {
			return err
		}
	}
	var buf []byte
	for _, line := range lines {
		if n := s.size + int64(len(buf)); n > 0 && n+int64(len(line)) > s.cfg.MaxBytes {
			if err := s.appendSync(buf); err != nil {
				return err
			}
			buf = buf[:0]
			if err := s.rotate(); err != nil {
				return err
			}
		}
		buf = append(buf, line...)
	}
	return s.appendSync(buf)
}

// appendSync writes b and fsyncs. On a failed write it cuts the file back
// to its old size so no partial line stays behind.
func (s *File) appendSync(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if _, err := s.f.Write(b); err != nil {
		if terr := s.f.Truncate(s.size); terr != nil {
			err = errors.Join(err, fmt.Errorf("cut back to %d bytes: %w", s.size, terr))
		}
		return fmt.Errorf("file sink: write %s: %w", s.cfg.Path, err)
	}
	s.size += int64(len(b))
	if err := s.syncFile(s.f); err != nil {
		return fmt.Errorf("file sink: fsync %s: %w", s.cfg.Path, err)
	}
	return nil
}

// rotate shifts Path.i to Path.i+1 (dropping Path.Keep), renames Path to
// Path.1, opens a new Path and syncs the directory.
func (s *File) rotate() error {
	if err := s.f.Close(); err != nil {
		s.f = nil
		return fmt.Errorf("file sink: close %s to rotate it: %w", s.cfg.Path, err)
	}
	s.f = nil
	p := s.cfg.Path
	if err := os.Remove(p + "." + strconv.Itoa(s.cfg.Keep)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("file sink: rotate: %w", err)
	}
	for i := s.cfg.Keep - 1; i >= 1; i-- {
		from, to := p+"."+strconv.Itoa(i), p+"."+strconv.Itoa(i+1)
		if err := os.Rename(from, to); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("file sink: rotate: %w", err)
		}
	}
	if err := os.Rename(p, p+".1"); err != nil {
		return fmt.Errorf("file sink: rotate: %w", err)
	}
	if err := s.open(); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(p)); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("file sink: fsync directory of %s: %w", p, err)
		}
	}
	return nil
}

var _ redisx.Positions = (*File)(nil)

// Applied returns the position recorded for (stream, group) in
// PositionsPath (redisx.Positions).
func (s *File) Applied(_ context.Context, stream, group string) (redisx.Position, error) {
	s.posMu.Lock()
	defer s.posMu.Unlock()
	if err := s.loadPositions(); err != nil {
		return redisx.Position{}, err
	}
	return s.pos[stream+"|"+group], nil
}

// Advance raises the recorded position and replaces PositionsPath before
// it returns (redisx.Positions).
func (s *File) Advance(_ context.Context, stream, group string, p redisx.Position, since string) error {
	s.posMu.Lock()
	defer s.posMu.Unlock()
	if err := s.loadPositions(); err != nil {
		return err
	}
	k := stream + "|" + group
	cur := s.pos[k]
	next := redisx.Position{Lead: redisx.MaxID(cur.Lead, p.Lead), Low: redisx.MaxID(cur.Low, p.Low)}
	if next != cur {
		s.pos[k] = next
		if err := s.savePositions(); err != nil {
			s.pos[k] = cur
			return err
		}
	}
	if since != "" && redisx.LessID(cur.Lead, since) {
		return &redisx.BehindError{Store: s.cfg.PositionsPath, Recorded: cur, Since: since}
	}
	return nil
}

// Reset sets the recorded position (redisx.Positions).
func (s *File) Reset(_ context.Context, stream, group string, p redisx.Position) error {
	s.posMu.Lock()
	defer s.posMu.Unlock()
	if err := s.loadPositions(); err != nil {
		return err
	}
	k := stream + "|" + group
	cur, had := s.pos[k]
	s.pos[k] = p
	if err := s.savePositions(); err != nil {
		if had {
			s.pos[k] = cur
		} else {
			delete(s.pos, k)
		}
		return err
	}
	return nil
}

// loadPositions reads PositionsPath once (a missing file holds nothing).
func (s *File) loadPositions() error {
	if s.pos != nil {
		return nil
	}
	b, err := os.ReadFile(s.cfg.PositionsPath)
	if errors.Is(err, fs.ErrNotExist) {
		s.pos = map[string]redisx.Position{}
		return nil
	}
	if err != nil {
		return fmt.Errorf("file sink: read the applied positions: %w", err)
	}
	pos := map[string]redisx.Position{}
	if err := json.Unmarshal(b, &pos); err != nil {
		return fmt.Errorf("file sink: %s is not a JSON object of applied positions (%v): move it away to start over", s.cfg.PositionsPath, err)
	}
	s.pos = pos
	return nil
}

// savePositions replaces PositionsPath: written aside, fsynced, renamed,
// the directory fsynced.
func (s *File) savePositions() error {
	b, err := json.Marshal(s.pos)
	if err != nil {
		return err
	}
	tmp := s.cfg.PositionsPath + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("file sink: record the applied positions: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = s.syncFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.cfg.PositionsPath)
	}
	if err == nil {
		if d, derr := os.Open(filepath.Dir(s.cfg.PositionsPath)); derr == nil {
			err = d.Sync()
			d.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("file sink: record the applied positions in %s: %w", s.cfg.PositionsPath, err)
	}
	return nil
}
