// Package blob stores temporary files and job outputs, and signs the URLs through
// which clients and runners reach them. Clients and runners never see the store
// itself, only signed URLs served by the gateway.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrNotFound is returned for a key that holds nothing.
var ErrNotFound = errors.New("blob not found")

// Local is a blob store in a local directory. Writes go to a temporary file first
// and are renamed into place, so a reader never sees half a file.
type Local struct{ dir string }

// NewLocal returns a store rooted at dir, creating it.
func NewLocal(dir string) (*Local, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return &Local{dir: abs}, nil
}

// ValidKey reports whether key is a clean relative path ("a/b/c"): no "..", no
// empty or dot segments, no backslashes.
func ValidKey(key string) bool {
	if key == "" || strings.HasPrefix(key, "/") || strings.ContainsAny(key, "\\\x00") {
		return false
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

func (l *Local) path(key string) (string, error) {
	if !ValidKey(key) {
		return "", fmt.Errorf("invalid blob key %q", key)
	}
	return filepath.Join(l.dir, filepath.FromSlash(key)), nil
}

// Put writes r to key, up to max bytes (0: no limit). It returns the bytes written;
// ErrTooLarge when r holds more than max.
func (l *Local) Put(_ context.Context, key string, r io.Reader, max int64) (int64, error) {
	p, err := l.path(key)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".upload-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	src := r
	if max > 0 {
		src = io.LimitReader(r, max+1)
	}
	n, err := io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, err
	}
	if max > 0 && n > max {
		return n, ErrTooLarge
	}
	return n, os.Rename(f.Name(), p)
}

// ErrTooLarge is returned by Put when the body exceeds the limit, and by ReadAll
// for a blob larger than MaxSmall.
var ErrTooLarge = errors.New("blob too large")

// Open returns the file at key and its size.
func (l *Local) Open(_ context.Context, key string) (io.ReadSeekCloser, int64, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, 0, ErrNotFound
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, ErrNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil || st.IsDir() {
		f.Close()
		return nil, 0, ErrNotFound
	}
	return f, st.Size(), nil
}

// ReadAll reads the whole blob at key, a small one: at most MaxSmall bytes, and
// ErrTooLarge past that.
func (l *Local) ReadAll(ctx context.Context, key string) ([]byte, error) {
	f, _, err := l.Open(ctx, key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSmall+1))
	if err == nil && len(b) > MaxSmall {
		return nil, ErrTooLarge
	}
	return b, err
}

// MaxSmall bounds what ReadAll reads: a runner's result.json, a large manifest.
const MaxSmall = 8 << 20

// List returns the keys under prefix (a folder: it ends in "/").
func (l *Local) List(_ context.Context, prefix string) ([]string, error) {
	root, err := l.path(strings.TrimSuffix(prefix, "/"))
	if err != nil {
		return nil, err
	}
	var keys []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err == nil {
			keys = append(keys, prefix+filepath.ToSlash(rel))
		}
		return nil
	})
	return keys, err
}

// Sweep deletes the files under prefix last written before cutoff, and the
// directories it leaves empty. It returns how many files it deleted.
func (l *Local) Sweep(_ context.Context, prefix string, cutoff time.Time) (int, error) {
	root, err := l.path(strings.TrimSuffix(prefix, "/"))
	if err != nil {
		return 0, err
	}
	n := 0
	var dirs []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root {
				dirs = append(dirs, p)
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		if info.ModTime().Before(cutoff) {
			if err := os.Remove(p); err == nil {
				n++
			}
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- { // deepest first; fails harmlessly when not empty
		os.Remove(dirs[i])
	}
	return n, err
}
