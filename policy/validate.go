package policy

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Rule is the stable identifier of a validation rule. Rules are part of the
// operator contract (documented in docs/configuration.md, matched by tests
// and tooling), so an identifier is never renamed once published.
type Rule string

// Shape rules, reported while decoding configuration.
const (
	RuleSyntax     Rule = "config.syntax"      // the file is not a YAML mapping
	RuleUnknownKey Rule = "config.unknown-key" // a key the schema does not know
	RuleType       Rule = "config.type"        // a value of the wrong type
)

// Topology and deployment rules.
const (
	RuleTopologyExactlyOne      Rule = "topology.exactly-one"
	RuleTopologyEndpoint        Rule = "topology.endpoint"
	RuleTopologyEndpointsEmpty  Rule = "topology.endpoints-empty"
	RuleTopologyEndpointsUnique Rule = "topology.endpoints-unique"
	RuleTopologyEndpointsMax    Rule = "topology.endpoints-max"
	RuleTopologySentinelMaster  Rule = "topology.sentinel-master"
	RuleTopologySentinelQuorum  Rule = "topology.sentinel-quorum"
	RuleTopologyClusterDatabase Rule = "topology.cluster-database"
	RuleDeploymentID            Rule = "deployment.id"
	RuleDeploymentDatabase      Rule = "deployment.database"
	RuleDeploymentClientName    Rule = "deployment.client-name"
	RuleTLSClientPair           Rule = "tls.client-pair"
	RuleTLSFile                 Rule = "tls.file"
	RuleTLSServerName           Rule = "tls.server-name"
	RuleTimeoutsPositive        Rule = "timeouts.positive"
	RuleTimeoutsBound           Rule = "timeouts.bound"
	RuleTimeoutsOrder           Rule = "timeouts.order"
	RuleLanesPositive           Rule = "lanes.positive"
	RuleLanesBound              Rule = "lanes.bound"
	RuleLanesOrder              Rule = "lanes.order"
	RuleBudgetsPositive         Rule = "budgets.positive"
	RuleBudgetsBound            Rule = "budgets.bound"
)

// Role, program and key rules.
const (
	RuleRolesUnknown        Rule = "roles.unknown"
	RuleRolesMissing        Rule = "roles.missing"
	RuleRolesDeployment     Rule = "roles.deployment"
	RuleRolesRequired       Rule = "roles.required"
	RuleRolesEviction       Rule = "roles.eviction"
	RuleRolesEvictionUnsafe Rule = "roles.eviction-unsafe"
	RuleRolesColocation     Rule = "roles.colocation"
	RuleProgramsMode        Rule = "programs.mode"
	RuleKeysSlug            Rule = "keys.slug"
	RuleKeysHMACVersions    Rule = "keys.hmac-versions"
	RuleKeysHMACWrite       Rule = "keys.hmac-write-version"
	RuleKeysHMACMaterial    Rule = "keys.hmac-material"
)

// Secret rules.
const (
	RuleSecretLiteral    Rule = "secret.literal"
	RuleSecretMalformed  Rule = "secret.malformed"
	RuleSecretEnvMissing Rule = "secret.env-missing"
	RuleSecretFile       Rule = "secret.file-unreadable"
	RuleSecretEmpty      Rule = "secret.empty"
	RuleSecretTooLarge   Rule = "secret.too-large"
)

// Capability and server rules.
const (
	RuleCapabilityUnknown Rule = "capability.unknown"
	// RuleCapabilityUnimplemented: a capability the design names that
	// this host does not implement (yet); config never accepts a block the
	// host cannot act on.
	RuleCapabilityUnimplemented Rule = "capability.unimplemented"
	RuleCapabilityProvider      Rule = "capability.provider"
	RuleCapabilityRole          Rule = "capability.role"
	RuleServerListen            Rule = "server.listen"
)

// Problem is one configuration defect: where (a dotted path such as
// redis.deployments.cache-main.timeouts.command), which rule, and a message
// for the operator. Messages never contain secret material or literal
// values that were rejected as secrets.
type Problem struct {
	Path    string
	Rule    Rule
	Message string
}

// String renders the problem as `path: message [rule]`, the form the CLI prints.
func (p Problem) String() string {
	path := p.Path
	if path == "" {
		path = "(root)"
	}
	return fmt.Sprintf("%s: %s [%s]", path, p.Message, p.Rule)
}

// Problems is a collection of problems. The zero value is ready to use.
type Problems []Problem

// Add appends a problem.
func (ps *Problems) Add(path string, rule Rule, format string, args ...any) {
	*ps = append(*ps, Problem{Path: path, Rule: rule, Message: fmt.Sprintf(format, args...)})
}

// Sort orders problems by path, then rule, then message, so output is
// deterministic regardless of map iteration order.
func (ps Problems) Sort() {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		return a.Message < b.Message
	})
}

// Err returns nil when there are no problems, otherwise a sorted
// *ValidationError holding a copy of them.
func (ps Problems) Err() error {
	if len(ps) == 0 {
		return nil
	}
	cp := append(Problems(nil), ps...)
	cp.Sort()
	return &ValidationError{Problems: cp}
}

// ErrInvalid matches every *ValidationError with errors.Is.
var ErrInvalid = errors.New("invalid configuration")

// ValidationError reports every problem found in one validation pass,
// sorted deterministically.
type ValidationError struct {
	Problems Problems
}

// Error lists every problem, one per line.
func (e *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "invalid configuration (%d problem", len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	b.WriteString(")")
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// Has reports whether a problem with the rule is present.
func (e *ValidationError) Has(rule Rule) bool {
	for _, p := range e.Problems {
		if p.Rule == rule {
			return true
		}
	}
	return false
}

// Rules lists every rule identifier, sorted (documentation and fixture
// coverage tests iterate it).
func Rules() []Rule {
	rs := []Rule{
		RuleSyntax, RuleUnknownKey, RuleType,
		RuleTopologyExactlyOne, RuleTopologyEndpoint, RuleTopologyEndpointsEmpty, RuleTopologyEndpointsUnique,
		RuleTopologyEndpointsMax, RuleTopologySentinelMaster, RuleTopologySentinelQuorum, RuleTopologyClusterDatabase,
		RuleDeploymentID, RuleDeploymentDatabase, RuleDeploymentClientName,
		RuleTLSClientPair, RuleTLSFile, RuleTLSServerName,
		RuleTimeoutsPositive, RuleTimeoutsBound, RuleTimeoutsOrder,
		RuleLanesPositive, RuleLanesBound, RuleLanesOrder, RuleBudgetsPositive, RuleBudgetsBound,
		RuleRolesUnknown, RuleRolesMissing, RuleRolesDeployment, RuleRolesRequired, RuleRolesEviction,
		RuleRolesEvictionUnsafe, RuleRolesColocation, RuleProgramsMode,
		RuleKeysSlug, RuleKeysHMACVersions, RuleKeysHMACWrite, RuleKeysHMACMaterial,
		RuleSecretLiteral, RuleSecretMalformed, RuleSecretEnvMissing, RuleSecretFile, RuleSecretEmpty, RuleSecretTooLarge,
		RuleCapabilityUnknown, RuleCapabilityUnimplemented, RuleCapabilityProvider, RuleCapabilityRole, RuleServerListen,
		RuleAuthAdminShared, RuleStartupOnFailure, RuleStartupBound,
	}
	rs = append(rs, GuestRules()...)
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	return rs
}
