package rlsconfig

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestDistinctHeaderNames: names clash ignoring case, and an unset (empty)
// name clashes with nothing — host/config checks the names as configured,
// envoyrls.New after filling in the defaults.
func TestDistinctHeaderNames(t *testing.T) {
	assert.True(t, DistinctHeaderNames("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"))
	assert.True(t, DistinctHeaderNames("X-Limit", "", ""), "unset names are not compared")
	assert.True(t, DistinctHeaderNames())
	for _, names := range [][]string{
		{"X-R", "x-r", ""},
		{"X-R", "", "x-r"},
		{"", "X-R", "X-R"},
		{"ratelimit-remaining", "RateLimit-Remaining", "RateLimit-Reset"},
	} {
		assert.False(t, DistinctHeaderNames(names...), "%q", names)
	}
}
