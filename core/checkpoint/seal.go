package checkpoint

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// KindSnapshot is a checkpoint that holds a whole sandbox (its memory,
// processes, open files and sockets, gVisor's), not the kernel's variables.
const KindSnapshot = "snapshot"

// RuleSnapshotSeal: a snapshot whose files are not the ones the core
// sealed (changed, swapped, another client's or session's) is never
// restored.
const RuleSnapshotSeal = "snapshot-seal"

// SealName is the file holding a snapshot's seal, beside its files.
const SealName = "seal"

// ErrSeal is a snapshot that does not match its seal.
var ErrSeal = errors.New("the snapshot does not match its seal")

// SealKey is the key snapshots of the store in root are sealed with, made
// on first use (0600, beside the clients' directories): every server
// sharing the store shares it, so a snapshot moves between them.
func SealKey(root string) ([]byte, error) {
	p := filepath.Join(root, ".seal-key")
	if k, err := os.ReadFile(p); err == nil && len(k) == 32 {
		return k, nil
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(root, ".seal-key-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(k)
	if err := errors.Join(werr, tmp.Close()); err != nil {
		return nil, err
	}
	// Link, not rename: two servers making the key at once keep the first.
	if err := os.Link(tmp.Name(), p); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	k, err = os.ReadFile(p)
	if err != nil || len(k) != 32 {
		return nil, fmt.Errorf("the snapshot seal key %s is unreadable or not 32 bytes: %v", p, err)
	}
	return k, nil
}

// Seal writes the seal of the snapshot in dir: a MAC, under key, over the
// client and session it is of and every file under dir (its path, size
// and content). Anything else than a regular file or a directory there is
// refused.
func Seal(key []byte, dir, client, id string) error {
	mac, err := digest(key, dir, client, id)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, SealName), []byte(hex.EncodeToString(mac)), 0o600)
}

// Verify checks the snapshot in dir against its seal, as client's
// snapshot of session id: ErrSeal when it does not match.
func Verify(key []byte, dir, client, id string) error {
	want, err := os.ReadFile(filepath.Join(dir, SealName))
	if err != nil {
		return fmt.Errorf("%w: no seal (%v)", ErrSeal, err)
	}
	mac, err := digest(key, dir, client, id)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSeal, err)
	}
	got, err := hex.DecodeString(string(want))
	if err != nil || !hmac.Equal(got, mac) {
		return ErrSeal
	}
	return nil
}

func digest(key []byte, dir, client, id string) ([]byte, error) {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "mcp-forge snapshot v1\x00%s\x00%s\n", client, id)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case rel == SealName:
			return nil
		case d.IsDir():
			fmt.Fprintf(m, "d %s\n", strconv.Quote(rel))
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is a %s, not a file", rel, d.Type())
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return err
		}
		fmt.Fprintf(m, "f %s %d %x\n", strconv.Quote(rel), n, h.Sum(nil))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m.Sum(nil), nil
}
