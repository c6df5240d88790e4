package capability

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
)

func TestReadinessText(t *testing.T) {
	for r := R0; r <= R3; r++ {
		b, err := r.MarshalText()
		require.NoError(t, err)
		var back Readiness
		require.NoError(t, back.UnmarshalText(b))
		assert.Equal(t, r, back)
	}
	assert.Equal(t, "R2", R2.String())
	assert.Equal(t, "production-baseline", R2.Meaning())
	for _, bad := range []string{"r2", "R4", "R", "2", " R1", "R1 "} {
		_, err := ParseReadiness(bad)
		assert.Error(t, err, bad)
	}
	_, err := Readiness(9).MarshalText()
	assert.Error(t, err)
	assert.False(t, Readiness(4).Valid())
}

func TestEffectiveReadinessNeverRaises(t *testing.T) {
	for claimed := R0; claimed <= R3; claimed++ {
		assert.Equal(t, claimed, EffectiveReadiness(claimed, nil))
		for capR := R0; capR <= R3; capR++ {
			got := EffectiveReadiness(claimed, []Downgrade{{Reason: "x", Cap: capR}})
			assert.LessOrEqual(t, got, claimed, "nothing raises readiness above the claim")
			assert.Equal(t, min(claimed, capR), got)
		}
	}
	assert.Equal(t, R0, EffectiveReadiness(R3, []Downgrade{DowngradeUnsafeColocation, {Reason: "guest-kind:codec", Cap: R0}}))
	assert.Equal(t, R1, EffectiveReadiness(R2, []Downgrade{DowngradeUnsafeColocation}))
}

func validDescriptor() Descriptor {
	return Descriptor{
		Capability: "rate-limit", Provider: "redis", Readiness: R2,
		Guarantees: []Guarantee{GuaranteeGlobalQuota}, NonGuarantees: []NonGuarantee{NonGuaranteeFairness},
		FailureMode: FailClosed, FailureOverrides: []FailureMode{FailLocalEmergency},
		MultiInstance: true, Role: policy.RoleCoordination, Impact: ImpactRequired, Implementation: "impl-v1",
	}
}

func TestDescriptorValidate(t *testing.T) {
	require.NoError(t, validDescriptor().Validate())
	cases := map[string]func(d *Descriptor){
		"bad id":               func(d *Descriptor) { d.Capability = "Rate_Limit" },
		"bad provider":         func(d *Descriptor) { d.Provider = "" },
		"readiness off scale":  func(d *Descriptor) { d.Readiness = 7 },
		"no guarantee":         func(d *Descriptor) { d.Guarantees = nil },
		"no non-guarantee":     func(d *Descriptor) { d.NonGuarantees = nil },
		"duplicate guarantee":  func(d *Descriptor) { d.Guarantees = []Guarantee{GuaranteeGlobalQuota, GuaranteeGlobalQuota} },
		"duplicate non":        func(d *Descriptor) { d.NonGuarantees = []NonGuarantee{NonGuaranteeFairness, NonGuaranteeFairness} },
		"unknown failure mode": func(d *Descriptor) { d.FailureMode = "retry-forever" },
		"override is default":  func(d *Descriptor) { d.FailureOverrides = []FailureMode{FailClosed} },
		"unknown impact":       func(d *Descriptor) { d.Impact = "sometimes" },
		"impact without role":  func(d *Descriptor) { d.Role = "" },
		"role without impact":  func(d *Descriptor) { d.Impact = ImpactNone },
		"unknown role":         func(d *Descriptor) { d.Role = "storage" },
		"quota on evictable":   func(d *Descriptor) { d.Role = policy.RoleCache },
		"lease on evictable": func(d *Descriptor) {
			d.Guarantees, d.MultiInstance, d.Role = []Guarantee{GuaranteeEfficiencyOnly}, false, policy.RoleCache
		},
		"idempotency on evictable": func(d *Descriptor) {
			d.Guarantees, d.MultiInstance, d.Role = []Guarantee{GuaranteeRequestReplay}, false, policy.RoleCache
		},
		"no implementation": func(d *Descriptor) { d.Implementation = "" },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			d := validDescriptor()
			mutate(&d)
			err := d.Validate()
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidDescriptor)
		})
	}
	// Every problem at once.
	d := validDescriptor()
	d.Guarantees, d.NonGuarantees, d.Implementation = nil, nil, ""
	assert.Len(t, strings.Split(d.Validate().Error(), "\n"), 3)
}

func TestDescriptorJSON(t *testing.T) {
	b, err := json.Marshal(validDescriptor())
	require.NoError(t, err)
	assert.Contains(t, string(b), `"readiness":"R2"`)
	assert.Contains(t, string(b), `"non-guarantees":["fairness"]`)
	var back Descriptor
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, validDescriptor(), back)
}

func TestParseCard(t *testing.T) {
	b, err := os.ReadFile("testdata/valid-card.md")
	require.NoError(t, err)
	c, err := ParseCard(b)
	require.NoError(t, err)
	assert.Equal(t, "Capability card: example", c.Title)
	assert.Equal(t, R2, c.Readiness)
	for i := ItemOwner; i <= ItemRunbook; i++ {
		assert.NotEmpty(t, c.Section(i), i.Title())
	}
	assert.Equal(t, []string{"runbook.md"}, c.Links(ItemRunbook))
	refs, err := c.Tests()
	require.NoError(t, err)
	require.Len(t, refs, 2)
	assert.Equal(t, []string{"./host/capability"}, refs[0].Packages)
	assert.Equal(t, []string{"TestParseCard", "TestDescriptorValidate"}, refs[0].Tests)
	assert.Empty(t, refs[1].Tests, "no -run: the whole package")
}

func TestParseCardRejects(t *testing.T) {
	valid, err := os.ReadFile("testdata/valid-card.md")
	require.NoError(t, err)
	s := string(valid)
	cases := map[string]string{
		"no title":         strings.Replace(s, "# Capability card: example", "Capability card", 1),
		"missing item":     strings.Replace(s, "## 12. Rolling upgrade and recovery\nText of item 12.\n", "", 1),
		"empty item":       strings.Replace(s, "Text of item 4.", "", 1),
		"wrong order":      strings.Replace(strings.Replace(s, "## 6. Configuration", "## 6. X", 1), "## 7. Liveness", "## 6. Configuration", 1),
		"misspelt heading": strings.Replace(s, "## 9. Fit, non-fit", "## 9. Fit and non-fit", 1),
		"extra section":    s + "\n## 14. More\ntext\n",
		"no readiness":     strings.Replace(s, "Readiness: R2", "Level two", 1),
		"two readiness":    strings.Replace(s, "Readiness: R2", "Readiness: R2\nReadiness: R3", 1),
		"readiness off":    strings.Replace(s, "Readiness: R2", "Readiness: R7", 1),
		"second title":     s + "\n# Another\n",
		"invalid utf-8":    s + "\xff",
		"too large":        s + strings.Repeat("x", MaxCardBytes),
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseCard([]byte(body))
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalidCard))
		})
	}
	// A heading inside a code fence is text.
	fenced := strings.Replace(s, "Text of item 8.", "```\n## not a heading\n```", 1)
	_, err = ParseCard([]byte(fenced))
	assert.NoError(t, err)
}

func TestCardTestsRejectUnresolvableEvidence(t *testing.T) {
	valid, err := os.ReadFile("testdata/valid-card.md")
	require.NoError(t, err)
	for name, cmd := range map[string]string{
		"regexp pattern": "`go test ./x -run 'Test.*'`",
		"unquoted run":   "`go test ./x -run TestA`",
		"no package":     "`go test -run 'TestA'`",
	} {
		t.Run(name, func(t *testing.T) {
			body := strings.Replace(string(valid), "- All: `go test -race ./host/capability`", "- "+cmd, 1)
			c, err := ParseCard([]byte(body))
			require.NoError(t, err)
			_, err = c.Tests()
			assert.ErrorIs(t, err, ErrInvalidCard)
		})
	}
}

func FuzzParseCard(f *testing.F) {
	valid, err := os.ReadFile("testdata/valid-card.md")
	require.NoError(f, err)
	f.Add(valid)
	f.Add([]byte("# t\n## 1. Owner module and semantic port\n"))
	f.Add([]byte("```\n# x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCard(b)
		if err != nil {
			return
		}
		assert.True(t, c.Readiness.Valid())
		for i := ItemOwner; i <= ItemRunbook; i++ {
			assert.NotEmpty(t, c.Section(i))
		}
		_, _ = c.Tests()
	})
}
