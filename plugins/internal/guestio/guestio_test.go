package guestio

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSanitize(t *testing.T) {
	assert.Equal(t, "ab?c?", Sanitize([]byte("ab\x1bc\xff"), 10))
	assert.Equal(t, "ab", Sanitize([]byte("abcdef"), 2))
	assert.Equal(t, "", Sanitize(nil, 5))
}

func TestFirstLine(t *testing.T) {
	assert.Equal(t, "panic: boom", FirstLine("panic: boom\ngoroutine 1"))
	assert.Equal(t, "one", FirstLine("one"))
}

func TestHeadWriter(t *testing.T) {
	var w HeadWriter
	n, err := w.Write([]byte(strings.Repeat("x", HeadBytes-1)))
	assert.NoError(t, err)
	assert.Equal(t, HeadBytes-1, n)
	n, err = w.Write([]byte("\nyyyy"))
	assert.NoError(t, err)
	assert.Equal(t, 5, n, "a write reports everything taken, even what is dropped")
	assert.Len(t, w.String(), HeadBytes)
	assert.True(t, strings.HasSuffix(w.String(), "x?"))
}
