package plugins

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
)

// hostileDescribeBase is the describe JSON the hostiledescribe guest is
// built with; every variant below is one edit of it.
const hostileDescribeBase = `{"abi":{"major":1,"minor":0},"module":"hostiledescribe","kinds":["rate-policy"],` +
	`"rate_policies":[{"id":"hostile.p","revision":1,"algorithm":"fixed-window","limit":10,` +
	`"window_ms":1000,"maximum_cost":1,"failure_mode":"fail-closed"}]}`

// hostileDescribes are describe outputs that encoding/json accepts (case-
// folded names, last duplicate wins, invalid UTF-8 and lone surrogates
// replaced by U+FFFD, null as the zero value) but the host must refuse, with
// the member the refusal names.
var hostileDescribes = map[string]struct{ from, to, names string }{
	"upper-rate-policies": {`"rate_policies"`, `"RATE_POLICIES"`, "unknown member /RATE_POLICIES"},
	"upper-kinds":         {`"kinds"`, `"KINDS"`, "unknown member /KINDS"},
	"mixed-case-member":   {`"maximum_cost"`, `"Maximum_Cost"`, "unknown member /rate_policies/0/Maximum_Cost"},
	"duplicate-kinds":     {`"kinds":["rate-policy"]`, `"kinds":["codec"],"kinds":["rate-policy"]`, "duplicate member /kinds"},
	"duplicate-limit":     {`"limit":10`, `"limit":10,"limit":1000000`, "duplicate member /rate_policies/0/limit"},
	"lone-surrogate":      {`"fail-closed"`, `"fail-\ud800closed"`, "malformed JSON at byte"},
	"invalid-utf8":        {`"fail-closed"`, "\"fail-\xffclosed\"", "malformed JSON at byte"},
	"null-member":         {`"limit":10`, `"limit":10,"burst":null`, "null (omit the member instead) at /rate_policies/0/burst"},
	"trailing-data":       {`"fail-closed"}]}`, `"fail-closed"}]}{}`, "trailing data after the JSON object"},
}

const describeSlotMarker = "@@caphost-describe-slot@@"

// The strict-describe tests need the hostile guest and its variants; the
// variants are derived before the warm-up compiles every test guest, so a
// -race run finds them in the cache too.
func init() {
	testGuests = append(testGuests, "plugins/testdata/guests/hostiledescribe")
	derivedGuests = append(derivedGuests, deriveHostileDescribes)
}

// deriveHostileDescribes writes each variant's JSON into the describe slot
// of the built hostiledescribe module (see its package comment).
func deriveHostileDescribes(wasm map[string][]byte) error {
	base, ok := wasm["hostiledescribe"]
	if !ok {
		return fmt.Errorf("hostiledescribe was not built")
	}
	at := bytes.Index(base, []byte(describeSlotMarker+hostileDescribeBase))
	if at < 0 || bytes.Count(base, []byte(describeSlotMarker)) != 1 {
		return fmt.Errorf("hostiledescribe: describe slot not found exactly once")
	}
	at += len(describeSlotMarker)
	for name, v := range hostileDescribes {
		js := strings.Replace(hostileDescribeBase, v.from, v.to, 1)
		if js == hostileDescribeBase {
			return fmt.Errorf("hostile describe %s: %q not in the base JSON", name, v.from)
		}
		if len(js) > len(hostileDescribeBase)+512 {
			return fmt.Errorf("hostile describe %s: too long for the slot", name)
		}
		b := bytes.Clone(base)
		// The slot's padding is 0x01 bytes: the JSON ends at the first one.
		copy(b[at:], append([]byte(js), 0x01))
		wasm["hostiledescribe."+name] = b
	}
	return nil
}

// A guest's describe output is decoded strictly, so a swap to a module whose
// describe a lenient decoder would have accepted is refused at load, names
// the offending member (or byte), and leaves the old generation serving.
func TestSwapRefusesHostileDescribe(t *testing.T) {
	ctx := context.Background()
	mgr := NewManager(newEngine(t, Config{Logger: slog.New(slog.DiscardHandler)}), ManagerOptions{
		Logger: slog.New(slog.DiscardHandler),
		Verify: func(string, []byte) error { return nil },
	})
	t.Cleanup(func() { _ = mgr.Close(context.Background()) })
	lim := Limits{CallTimeout: 5 * time.Second} // answers, not deadlines, are on trial
	require.NoError(t, mgr.Load(ctx, "hostile", wasmOf(t, "hostiledescribe"), lim), "the unpatched guest is valid and conforms")

	for name, v := range hostileDescribes {
		t.Run(name, func(t *testing.T) {
			_, err := mgr.Swap(ctx, "hostile", wasmOf(t, "hostiledescribe."+name))
			require.Error(t, err, "a swap to a describe with %s must be refused", name)
			var se *SwapError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, StageLoad, se.Stage)
			assert.ErrorIs(t, err, ClassInvalidDescription)
			assert.ErrorIs(t, err, abi.ErrInvalidDescription)
			assert.Contains(t, err.Error(), v.names)
			st := statusOf(t, mgr, "hostile")
			assert.Equal(t, uint64(1), st.Generation, "the first generation keeps serving")
			assert.False(t, st.LastSwap.OK)
		})
	}
	// Still serving the valid generation.
	err := mgr.Use(ctx, "hostile", func(m Guest) error {
		_, err := RateSelect(ctx, m, &abi.RateSelectRequest{Route: "/", Method: "GET"})
		return err
	})
	require.NoError(t, err)
}

func statusOf(t *testing.T, mgr *Manager, name string) ModuleStatus {
	t.Helper()
	for _, s := range mgr.Status() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("module %s has no status", name)
	return ModuleStatus{}
}
