package rlsconfig

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxFiles bounds the files of one configuration.
const MaxFiles = 64

// LoadFiles reads, parses and combines configuration files (one domain
// each), reading at most MaxFileBytes of each: the reload path of the
// Envoy service, which reads the files `caphost check` and start-up
// checked. Every problem of every file is reported at once as an *Error.
func LoadFiles(files []string) (*Config, error) {
	var ps Problems
	if len(files) == 0 || len(files) > MaxFiles {
		ps.add("", "", 0, fmt.Sprintf("%d files, want 1..%d", len(files), MaxFiles))
		return nil, ps.err()
	}
	var domains []*Domain
	for _, f := range files {
		data, err := readBounded(f)
		if err != nil {
			ps.add(f, "", 0, err.Error())
			continue
		}
		d, err := Parse(f, data)
		var e *Error
		if errors.As(err, &e) {
			ps = append(ps, e.Problems...)
			continue
		}
		domains = append(domains, d)
	}
	if err := ps.err(); err != nil {
		return nil, err
	}
	return New(domains...)
}

// readBounded reads a file of at most MaxFileBytes; the error never quotes
// the file's content.
func readBounded(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", unwrapPath(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", unwrapPath(err))
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("more than %d bytes", MaxFileBytes)
	}
	return data, nil
}

// unwrapPath drops the *os.PathError wrapper, whose path the problem
// already names.
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
