package programs

import (
	"crypto/sha1" //nolint:gosec // Redis script id
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// facadeMethods names the typed Executor method of every program.
func facadeMethods() map[string]string {
	return map[string]string{
		"set-if-absent-with-ttl-v1":     "SetIfAbsentWithTTL",
		"compare-and-delete-v1":         "CompareAndDelete",
		"compare-and-expire-v1":         "CompareAndExpire",
		"compare-and-set-with-ttl-v1":   "CompareAndSetWithTTL",
		"increment-with-initial-ttl-v1": "IncrementWithInitialTTL",
		"region-generation-init-v1":     "RegionGenerationInit",
		"region-generation-bump-v1":     "RegionGenerationBump",
		"cache-refresh-claim-v1":        "CacheRefreshClaim",
		"cache-put-v2":                  "CachePut",
		"cache-refresh-release-v1":      "CacheRefreshRelease",
		"rate-fixed-window-v1":          "RateFixedWindow",
		"rate-fixed-window-v2":          "RateFixedWindowV2",
		"rate-fixed-window-v3":          "RateFixedWindowV3",
		"rate-sliding-counter-v2":       "RateSlidingCounterV2",
		"rate-gcra-v2":                  "RateGCRAV2",
		"rate-sliding-log-v2":           "RateSlidingLogV2",
		"rate-sliding-log-v3":           "RateSlidingLogV3",
		"rate-sliding-counter-v1":       "RateSlidingCounter",
		"rate-token-bucket-v1":          "RateTokenBucket",
		"rate-token-bucket-v2":          "RateTokenBucketV2",
		"rate-gcra-v1":                  "RateGCRA",
		"rate-sliding-log-v1":           "RateSlidingLog",
		"rate-concurrency-acquire-v1":   "RateConcurrencyAcquire",
		"rate-concurrency-acquire-v2":   "RateConcurrencyAcquireV2",
		"rate-concurrency-renew-v2":     "RateConcurrencyRenewV2",
		"rate-concurrency-release-v2":   "RateConcurrencyReleaseV2",
		"rate-concurrency-acquire-v3":   "RateConcurrencyAcquireV3",
		"rate-concurrency-renew-v3":     "RateConcurrencyRenewV3",
		"rate-concurrency-release-v3":   "RateConcurrencyReleaseV3",
		"rate-concurrency-renew-v1":     "RateConcurrencyRenew",
		"rate-concurrency-release-v1":   "RateConcurrencyRelease",
		"fenced-counter-provision-v1":   "FenceCounterProvision",
		"fenced-lease-acquire-v1":       "FencedLeaseAcquire",
		"fenced-lease-inspect-v1":       "FencedLeaseInspect",
		"fenced-lease-renew-v1":         "FencedLeaseRenew",
		"fenced-lease-release-v1":       "FencedLeaseRelease",
		"notify-submit-v1":              "NotifySubmit",
		"notify-submit-v2":              "NotifySubmitV2",
		"notify-submit-v3":              "NotifySubmitV3",
		"notify-claim-v1":               "NotifyClaim",
		"notify-claim-v2":               "NotifyClaimV2",
		"notify-finalize-v1":            "NotifyFinalize",
		"notify-finalize-v2":            "NotifyFinalizeV2",
		"notify-quarantine-v1":          "NotifyQuarantine",
		"notify-inspect-v1":             "NotifyInspect",
		"idempotency-claim-v1":          "IdempotencyClaim",
		"idempotency-inspect-v1":        "IdempotencyInspect",
		"idempotency-start-v1":          "IdempotencyStart",
		"idempotency-renew-v1":          "IdempotencyRenew",
		"idempotency-complete-v1":       "IdempotencyComplete",
		"idempotency-fail-v1":           "IdempotencyFail",
		"idempotency-release-v1":        "IdempotencyRelease",
		"lease-acquire-v1":              "LeaseAcquire",
		"lease-inspect-v1":              "LeaseInspect",
		"lease-renew-v1":                "LeaseRenew",
		"lease-release-v1":              "LeaseRelease",
		"lease-acquire-v2":              "LeaseAcquireV2",
		"lease-release-v2":              "LeaseReleaseV2",
		"lease-acquire-v3":              "LeaseAcquireV3",
		"lease-release-v3":              "LeaseReleaseV3",
	}
}

func TestDriftManifestMatchesSources(t *testing.T) {
	c := mustCatalog(t)
	entries, err := fs.ReadDir(embedded, "lua")
	require.NoError(t, err)
	var files []string
	for _, e := range entries {
		files = append(files, strings.TrimSuffix(e.Name(), ".lua"))
	}
	var ids []string
	for _, p := range c.Programs() {
		ids = append(ids, p.ID())
		src, err := os.ReadFile(filepath.Join("lua", p.ID()+".lua"))
		require.NoError(t, err)
		s256 := sha256.Sum256(src)
		s1 := sha1.Sum(src) //nolint:gosec
		assert.Equal(t, hex.EncodeToString(s256[:]), p.SHA256(), "%s sha256 (update program-set.json)", p.ID())
		assert.Equal(t, hex.EncodeToString(s1[:]), p.SHA1(), "%s sha1 (update program-set.json)", p.ID())
		assert.Equal(t, string(src), p.Source(), "%s embedded bytes differ from the file", p.ID())
		assert.True(t, c.AllowSHA(p.SHA1()))
		assert.True(t, c.AllowFunction(p.Function()))
	}
	assert.Equal(t, files, ids, "every .lua has a manifest entry and vice versa")
	assert.True(t, sort.StringsAreSorted(ids))
	assert.False(t, c.AllowSHA(strings.Repeat("0", 40)))
	assert.False(t, c.AllowFunction("ca_unknown_v1"))
	assert.True(t, c.AllowFunction("ca_program_set_info"))
}

func TestDriftEveryProgramHasFacadeAndVectors(t *testing.T) {
	c := mustCatalog(t)
	fac := facades()
	methods := facadeMethods()
	vecs := map[string]vectorFile{}
	for _, f := range loadVectors(t) {
		vecs[f.Program] = f
	}
	et := reflect.TypeOf(&Executor{})
	for _, p := range c.Programs() {
		id := p.ID()
		_, ok := fac[id]
		assert.True(t, ok, "%s has no facade adapter", id)
		m, ok := methods[id]
		if assert.True(t, ok, "%s has no facade method", id) {
			_, ok = et.MethodByName(m)
			assert.True(t, ok, "Executor.%s missing", m)
		}
		f, ok := vecs[id]
		if !assert.True(t, ok, "%s has no golden vectors", id) {
			continue
		}
		// §7.11 minimum set.
		covered := map[string]bool{}
		statuses := map[string]bool{}
		for _, v := range f.Vectors {
			for _, cv := range v.Covers {
				covered[cv] = true
			}
			for _, s := range v.Steps {
				statuses[s.Expect.Status] = true
			}
		}
		for _, need := range []string{"absent", "apply", "wrong-type", "repeat"} {
			assert.True(t, covered[need], "%s vectors do not cover %q", id, need)
		}
		for _, s := range p.spec.Statuses {
			if s.Outcome == "CONFLICT" || s.Outcome == "NOT_APPLIED" {
				assert.True(t, covered["condition-reject"], "%s has a conditional status but no condition-reject vector", id)
			}
		}
		assert.True(t, covered["boundary-ttl"] || covered["boundary-numeric"] || covered["boundary-size"], "%s has no boundary vector", id)
		for _, s := range p.spec.Statuses {
			assert.True(t, statuses[s.Name], "%s: status %s has no vector", id, s.Name)
		}
		delete(vecs, id)
	}
	assert.Empty(t, vecs, "vector files without a program")
	assert.Len(t, fac, len(c.Programs()))
}

func TestFacadeStatusesMatchManifest(t *testing.T) {
	c := mustCatalog(t)
	for _, p := range c.Programs() {
		defs := facadeStatuses(p.ID())
		require.Len(t, defs, len(p.spec.Statuses), p.ID())
		for i, s := range p.spec.Statuses {
			assert.Equal(t, s.Name, defs[i].name, "%s code %d", p.ID(), s.Code)
			o, ok := parseOutcome(s.Outcome)
			require.True(t, ok)
			assert.Equal(t, o, defs[i].outcome, "%s %s outcome", p.ID(), s.Name)
		}
		assert.Equal(t, "UNKNOWN("+strconv.Itoa(len(defs)+1)+")", statusName(defs, uint8(len(defs)+1)))
		assert.False(t, statusOutcome(defs, uint8(len(defs)+1)).Valid(), "an unknown status must not carry an outcome")
	}
	// Spot checks of the typed enums against §7.9 / the brief.
	assert.Equal(t, "DELETED", CompareAndDeleteDeleted.String())
	assert.Equal(t, "NOT_OWNER", CompareAndDeleteNotOwner.String())
	assert.Equal(t, "CONFLICT", CompareAndDeleteNotOwner.Outcome().String())
	assert.Equal(t, "REJECTED", CompareAndDeleteWrongType.Outcome().String())
	assert.Equal(t, "NOT_APPLIED", CompareAndDeleteAbsent.Outcome().String())
	assert.Equal(t, "REJECTED", IncrementInvalid.Outcome().String())
}

var (
	reRedisCall  = regexp.MustCompile(`redis\.(?:p?call)\(\s*'([A-Za-z]+)'\s*(?:,\s*([^,)]+))?`)
	reStatusDoc  = regexp.MustCompile(`(?m)^-- status: (.*)$`)
	reReturnList = regexp.MustCompile(`return \{`)
	reComment    = regexp.MustCompile(`--[^\n]*`)
)

// TestDriftLuaStaticRules checks the §7.4 rules that can be read off the
// source: only KEYS[n] reach commands as keys, the commands used equal the
// manifest's ACL allowlist, no loops or dynamic code, the documented status
// list equals the manifest, and every return tuple has the manifest's arity
// and a known status code.
func TestDriftLuaStaticRules(t *testing.T) {
	c := mustCatalog(t)
	for _, p := range c.Programs() {
		src := p.Source()
		spec := p.spec
		t.Run(p.ID(), func(t *testing.T) {
			used := map[string]bool{}
			for _, m := range reRedisCall.FindAllStringSubmatch(src, -1) {
				cmd := strings.ToUpper(m[1])
				used[cmd] = true
				if cmd == "TIME" {
					continue
				}
				arg := strings.TrimSpace(m[2])
				require.Regexp(t, `^KEYS\[[1-9]\]$`, arg, "%s key argument must be KEYS[n]", cmd)
				n, _ := strconv.Atoi(arg[5 : len(arg)-1])
				assert.LessOrEqual(t, n, len(spec.Keys), "KEYS index beyond the manifest")
			}
			var usedList []string
			for k := range used {
				usedList = append(usedList, k)
			}
			sort.Strings(usedList)
			acl := append([]string(nil), spec.ACLCommands...)
			sort.Strings(acl)
			assert.Equal(t, acl, usedList, "aclCommands must equal the commands called")
			if spec.Clock == "none" {
				assert.NotContains(t, usedList, "TIME")
			}
			code := reComment.ReplaceAllString(src, "")
			assert.NotRegexp(t, `\b(for|while|repeat|goto|function|loadstring|load|dofile|setfenv|getfenv|rawset|_G)\b`, code,
				"no loops, no nested functions, no dynamic code")
			assert.NotContains(t, code, "redis.setresp")
			// Keys are never computed: no string is concatenated into KEYS.
			assert.NotRegexp(t, `KEYS\[[^\]]*\.\.`, src)

			doc := reStatusDoc.FindStringSubmatch(src)
			require.NotNil(t, doc, "source must document its statuses")
			var want []string
			for _, s := range spec.Statuses {
				want = append(want, strconv.FormatInt(s.Code, 10)+" "+s.Name)
			}
			assert.Equal(t, strings.Join(want, ", "), doc[1])

			locs := reReturnList.FindAllStringIndex(src, -1)
			require.NotEmpty(t, locs)
			for _, loc := range locs {
				elems := topLevelElems(t, src[loc[1]:])
				require.Len(t, elems, 3+len(spec.Result), "return tuple arity: %v", elems)
				assert.Equal(t, "1", elems[0], "result schema version")
				code, err := strconv.Atoi(elems[1])
				require.NoError(t, err, "status must be a literal")
				assert.True(t, code >= 1 && code <= len(spec.Statuses), "status %d unknown", code)
				if spec.Clock == "none" {
					assert.Equal(t, "0", elems[2], "serverNowMillis must be 0 without a clock")
				}
			}
		})
	}
}

// topLevelElems splits the table constructor starting after "{" into its
// top-level elements.
func topLevelElems(t *testing.T, s string) []string {
	depth := 0
	var out []string
	start := 0
	for i, r := range s {
		switch r {
		case '(', '{', '[':
			depth++
		case ')', ']':
			depth--
		case '}':
			if depth == 0 {
				return append(out, strings.TrimSpace(s[start:i]))
			}
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	t.Fatalf("unterminated return tuple")
	return nil
}

func TestLibraryContainsEveryProgram(t *testing.T) {
	c := mustCatalog(t)
	name, code, digest := c.Library()
	assert.Equal(t, "caphost_v1", name)
	assert.True(t, strings.HasPrefix(code, "#!lua name=caphost_v1\n"))
	assert.Contains(t, code, "\n-- Generated by caphost runtime/programs from ca-redis-programs-v1 v15.")
	// A read-only program (the inspect programs) is registered with the
	// no-writes flag that FCALL_RO requires; the others plainly.
	readOnly := 0
	for _, p := range c.Programs() {
		if *p.spec.ReadOnly {
			readOnly++
			assert.Contains(t, code, "redis.register_function{function_name='"+p.Function()+
				"', flags={'no-writes'}, callback=function(KEYS, ARGV)\n"+p.Source()+"end}\n")
			continue
		}
		assert.Contains(t, code, "redis.register_function('"+p.Function()+"', function(KEYS, ARGV)\n"+p.Source()+"end)\n")
	}
	assert.Positive(t, readOnly)
	assert.Contains(t, code, "function_name='ca_program_set_info', flags={'no-writes'}")
	assert.Contains(t, code, "'"+digest+"'")
	// The digest covers everything before the info function.
	idx := strings.Index(code, "\n-- Read-only identity")
	require.Positive(t, idx)
	sum := sha256.Sum256([]byte(code[:idx]))
	assert.Equal(t, hex.EncodeToString(sum[:]), digest)
	// Deterministic: a second load renders the same bytes.
	c2 := mustCatalog(t)
	_, code2, digest2 := c2.Library()
	assert.Equal(t, code, code2)
	assert.Equal(t, digest, digest2)
}

func TestLoadRejectsDrift(t *testing.T) {
	base := embeddedCopy(t)
	_, err := loadFS(base)
	require.NoError(t, err)

	tampered := fstest.MapFS{}
	for k, v := range base {
		tampered[k] = v
	}
	tampered["lua/compare-and-delete-v1.lua"] = &fstest.MapFile{Data: append(append([]byte(nil), base["lua/compare-and-delete-v1.lua"].Data...), '\n')}
	_, err = loadFS(tampered)
	require.ErrorIs(t, err, ErrManifest)
	assert.Contains(t, err.Error(), "sha256 drift")
	assert.Contains(t, err.Error(), "sha1 drift")

	extra := fstest.MapFS{}
	for k, v := range base {
		extra[k] = v
	}
	extra["lua/rogue-v1.lua"] = &fstest.MapFile{Data: []byte("return 1\n")}
	_, err = loadFS(extra)
	require.ErrorIs(t, err, ErrManifest)
	assert.Contains(t, err.Error(), "rogue-v1.lua has no manifest entry")

	missing := fstest.MapFS{}
	for k, v := range base {
		missing[k] = v
	}
	delete(missing, "lua/compare-and-expire-v1.lua")
	_, err = loadFS(missing)
	require.ErrorIs(t, err, ErrManifest)
	assert.Contains(t, err.Error(), "source lua/compare-and-expire-v1.lua missing")
}

// embeddedCopy returns a writable copy of the embedded catalog files.
func embeddedCopy(t testing.TB) fstest.MapFS {
	t.Helper()
	base := fstest.MapFS{}
	require.NoError(t, fs.WalkDir(embedded, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(embedded, p)
		base[p] = &fstest.MapFile{Data: b}
		return err
	}))
	return base
}
