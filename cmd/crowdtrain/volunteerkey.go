package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// The volunteer key: 32 random bytes, base64url, made on first use and
// kept in a file only its owner reads. The coordinator attaches credit and
// standing to it (a hash of it), so it is reused by every later run.

// defaultKeyFile is $XDG_CONFIG_HOME/crowdtrain/volunteer-key, else
// ~/.config/crowdtrain/volunteer-key; "" where neither can be found.
func defaultKeyFile() string {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "crowdtrain", "volunteer-key")
}

// loadVolunteerKey reads the key in path, or makes one there (0600, its
// directory 0700) when the file does not exist.
func loadVolunteerKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		key := strings.TrimSpace(string(b))
		if err := protocol.CheckVolunteerKey(key); err != nil {
			return "", usagef("volunteer key file %s does not hold a volunteer key: %v; remove it to make a new one "+
				"(credit earned with the old key stays with it), or pass --key-file with another file", path, err)
		}
		return key, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("volunteer key file %s: %w: fix its permissions, or pass --key-file with another file", path, err)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	key := base64.RawURLEncoding.EncodeToString(raw[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("volunteer key: cannot create %s: %w: pass --key-file with a writable path", filepath.Dir(path), err)
	}
	// Written whole to a temporary file, then linked into place, which
	// fails if the file exists: two workers starting at once end up with
	// one key, and no one reads a half-written file.
	f, err := os.CreateTemp(filepath.Dir(path), ".volunteer-key-*")
	if err != nil {
		return "", fmt.Errorf("volunteer key: cannot create a file in %s: %w: pass --key-file with a writable path", filepath.Dir(path), err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(key + "\n")
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(f.Name(), path)
	}
	switch {
	case errors.Is(err, fs.ErrExist):
		return loadVolunteerKey(path)
	case err != nil:
		return "", fmt.Errorf("volunteer key: cannot create %s: %w: pass --key-file with a writable path", path, err)
	}
	return key, nil
}
