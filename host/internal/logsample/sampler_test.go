package logsample_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/caphost/caphost/host/internal/logsample"
)

func TestSamplerBoundsEachMinute(t *testing.T) {
	now := time.Unix(6000, 0)
	s := logsample.New(2, func() time.Time { return now })
	assert.True(t, s.Take())
	assert.True(t, s.Take())
	assert.False(t, s.Take(), "a third line in the same minute")
	now = now.Add(59 * time.Second)
	assert.False(t, s.Take(), "still the same clock minute")
	now = now.Add(time.Second)
	assert.True(t, s.Take(), "a new minute")
	assert.False(t, logsample.New(0, nil).Take(), "0 lets nothing through")
}
