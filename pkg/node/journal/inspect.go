package journal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// inspectLockWait is how long Inspect waits for the file before reading a
// copy of it (a running nodelet holds it).
const inspectLockWait = 500 * time.Millisecond

// Inspect reads a journal without changing it, for operators. While a
// nodelet holds the file, a copy is read; Copied then says so.
func Inspect(path string) (state *State, copied bool, err error) {
	if _, err := os.Stat(path); err != nil {
		return nil, false, err
	}
	state, err = inspectFile(path)
	if !errors.Is(err, bolterrors.ErrTimeout) {
		return state, false, err
	}
	tmp, err := os.MkdirTemp("", "nodelet-journal-")
	if err != nil {
		return nil, false, err
	}
	defer os.RemoveAll(tmp)
	cp := filepath.Join(tmp, filepath.Base(path))
	if err := copyFile(path, cp); err != nil {
		return nil, false, err
	}
	state, err = inspectFile(cp)
	if err != nil {
		return nil, true, fmt.Errorf("reading a copy of the journal, which nodelet holds (it may have been writing: try again): %w", err)
	}
	return state, true, nil
}

func inspectFile(path string) (state *State, err error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: inspectLockWait})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrDamaged, r)
		}
	}()
	if err := db.View(func(tx *bolt.Tx) error {
		for _, b := range buckets {
			if tx.Bucket([]byte(b)) == nil {
				return fmt.Errorf("%w: no %s bucket: not a node journal", ErrDamaged, b)
			}
		}
		for cerr := range tx.Check() {
			return fmt.Errorf("%w: %v", ErrDamaged, cerr)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return load(db)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
