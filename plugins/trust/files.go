package trust

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// MaxKeyFileBytes bounds a PEM key file; an ed25519 PEM key is under 200 bytes.
const MaxKeyFileBytes = 16 << 10

// readBounded reads a regular file of at most limit bytes. check, when not
// nil, inspects the opened file's metadata before anything is read (fstat on
// the open descriptor, so the file cannot be swapped in between).
func readBounded(path string, limit int64, check func(os.FileInfo) error) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: errors.New("not a regular file")}
	}
	if check != nil {
		if err := check(fi); err != nil {
			return nil, err
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		clear(b)
		return nil, &Error{Kind: ErrTooLarge, Detail: fmt.Sprintf("%s exceeds %d bytes", path, limit)}
	}
	return b, nil
}

// ReadPublicKeyFile reads and parses a PEM public key file.
func ReadPublicKeyFile(path string) (PublicKey, error) {
	b, err := readBounded(path, MaxKeyFileBytes, nil)
	if err != nil {
		return PublicKey{}, &Error{Kind: ErrMalformedKey, Detail: "read public key", Err: err}
	}
	k, err := ParsePublicKey(b)
	if err != nil {
		return PublicKey{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// ReadPrivateKeyFile reads a PEM private key file after checking that only
// its owner can access it (mode 0600 or stricter), and checks that it parses.
// The caller should clear the returned bytes when done.
func ReadPrivateKeyFile(path string) ([]byte, error) {
	// The mode is checked before reading: a key that others can read may
	// already be compromised, and refusing it is how the operator learns.
	owner := func(fi os.FileInfo) error {
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			return newErr(ErrKeyPermissions, fmt.Sprintf("%s has mode %04o; a private key must be accessible by its owner only (chmod 600 %s)", path, perm, path))
		}
		return nil
	}
	b, err := readBounded(path, MaxKeyFileBytes, owner)
	if errors.Is(err, ErrKeyPermissions) {
		return nil, err
	}
	if err != nil {
		return nil, &Error{Kind: ErrMalformedKey, Detail: "read private key", Err: err}
	}
	if _, err := parsePrivateKey(b); err != nil {
		clear(b)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// ReadSignatureFile reads and strictly decodes a signature file.
func ReadSignatureFile(path string) (*Signature, error) {
	b, err := readBounded(path, MaxSignatureFileBytes, nil)
	if err != nil {
		return nil, &Error{Kind: ErrMalformedSignature, Detail: "read signature", Err: err}
	}
	s, err := ParseSignature(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
