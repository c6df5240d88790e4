// Package guestio holds the small text helpers both guest engines (plugins
// and plugins/extism) use on what a guest writes: bounding and sanitising
// guest text before it reaches a log line or an error, and keeping the head
// of a guest's stderr. Guest output is untrusted; nothing here interprets it.
package guestio

import "strings"

// Sanitize returns at most max bytes of b with every byte outside printable
// ASCII replaced by '?', so guest text cannot forge log lines or carry
// terminal escapes.
func Sanitize(b []byte, max int) string {
	if len(b) > max {
		b = b[:max]
	}
	out := make([]byte, len(b))
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		out[i] = c
	}
	return string(out)
}

// FirstLine returns s up to its first newline.
func FirstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// HeadBytes is how much of a guest's stderr HeadWriter keeps.
const HeadBytes = 256

// HeadWriter keeps the first HeadBytes a guest writes to stderr: the Go
// runtime prints a panic's message first and its stack after, and only the
// message is worth an error detail. It never fails, so a guest's writes
// never error.
type HeadWriter struct{ b []byte }

// Write implements io.Writer.
func (w *HeadWriter) Write(p []byte) (int, error) {
	if room := HeadBytes - len(w.b); room > 0 {
		w.b = append(w.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// String returns the kept head, sanitised.
func (w *HeadWriter) String() string { return Sanitize(w.b, HeadBytes) }
