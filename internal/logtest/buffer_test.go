package logtest_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/caphost/caphost/internal/logtest"
)

func TestBufferConcurrentWrites(t *testing.T) {
	var b logtest.Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprintf(&b, "w%d\n", i)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 800, strings.Count(b.String(), "\n"))
}
