package rlsconfig

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/caphost/caphost/policy"
)

// Parse decodes one configuration file (file names it in problems). Every
// problem is reported at once as an *Error.
func Parse(file string, data []byte) (*Domain, error) {
	p := &parser{file: file}
	if len(data) > MaxFileBytes {
		p.ps.add(file, "", 0, fmt.Sprintf("%d bytes, at most %d", len(data), MaxFileBytes))
		return nil, p.ps.err()
	}
	if !utf8.Valid(data) {
		p.ps.add(file, "", 0, "not valid UTF-8")
		return nil, p.ps.err()
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			p.ps.add(file, "", 0, "empty file: want a mapping with domain and descriptors")
		} else {
			p.ps.add(file, "", 0, "not YAML: "+clip(err.Error()))
		}
		return nil, p.ps.err()
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		p.ps.add(file, "", 0, "more than one YAML document")
		return nil, p.ps.err()
	}
	d := &Domain{file: file, root: newNode()}
	p.root(&doc, d)
	if err := p.ps.err(); err != nil {
		return nil, err
	}
	return d, nil
}

type parser struct {
	file string
	ps   Problems
}

func (p *parser) add(path string, n *yaml.Node, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.ps.add(p.file, path, line, fmt.Sprintf(format, args...))
}

// fields checks that n is a mapping of distinct, known scalar keys and
// returns its values by key.
func (p *parser) fields(path string, n *yaml.Node, known ...string) (map[string]*yaml.Node, bool) {
	if !p.plain(path, n) {
		return nil, false
	}
	if n.Kind != yaml.MappingNode {
		p.add(path, n, "want a mapping, got %s", kindName(n))
		return nil, false
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kp := join(path, k.Value)
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			p.add(path, k, "a mapping key must be a string")
			continue
		}
		if !contains(known, k.Value) {
			p.add(kp, k, "unknown field %q%s", clip(k.Value), unsupported(k.Value))
			continue
		}
		if _, dup := out[k.Value]; dup {
			p.add(kp, k, "duplicate field")
			continue
		}
		if !p.plain(kp, v) {
			continue
		}
		out[k.Value] = v
	}
	return out, true
}

// plain refuses anchors, aliases and explicit tags: envoyproxy/ratelimit
// configurations never need them, and aliases let a small file expand
// without bound.
func (p *parser) plain(path string, n *yaml.Node) bool {
	switch {
	case n.Kind == yaml.AliasNode:
		p.add(path, n, "aliases are not allowed")
		return false
	case n.Anchor != "":
		p.add(path, n, "anchors are not allowed")
		return false
	case n.Style&yaml.TaggedStyle != 0:
		p.add(path, n, "explicit tags are not allowed")
		return false
	}
	return true
}

// unsupported explains the fields of envoyproxy/ratelimit's format caphost
// refuses.
func unsupported(field string) string {
	switch field {
	case "replaces", "quota_mode", "share_threshold", "value_to_metric", "metadata":
		return " (envoyproxy/ratelimit's " + field + " is not supported by caphost)"
	}
	return ""
}

func (p *parser) root(doc *yaml.Node, d *Domain) {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		p.add("", doc, "want one YAML document")
		return
	}
	f, ok := p.fields("", doc.Content[0], "domain", "descriptors")
	if !ok {
		return
	}
	dn, ok := f["domain"]
	if !ok {
		p.add("domain", doc.Content[0], "required")
	} else if s, ok := p.str("domain", dn); ok {
		switch {
		case s == "":
			p.add("domain", dn, "must not be empty")
		case len(s) > MaxDomainBytes:
			p.add("domain", dn, "%d bytes, at most %d", len(s), MaxDomainBytes)
		default:
			d.name = s
		}
	}
	if ds, ok := f["descriptors"]; ok {
		p.descriptors("descriptors", ds, d, d.root, nil, 1)
	}
}

// descriptors decodes a descriptor list into n.
func (p *parser) descriptors(path string, list *yaml.Node, d *Domain, n *node, parent []Entry, depth int) {
	if list.ShortTag() == "!!null" {
		return
	}
	if list.Kind != yaml.SequenceNode {
		p.add(path, list, "want a list of descriptors, got %s", kindName(list))
		return
	}
	if depth > MaxDepth {
		p.add(path, list, "descriptors nested deeper than %d levels", MaxDepth)
		return
	}
	for i, item := range list.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		d.nodes++
		if d.nodes > MaxNodes {
			p.add(ip, item, "more than %d descriptors", MaxNodes)
			return
		}
		p.descriptor(ip, item, d, n, parent, depth)
	}
}

func (p *parser) descriptor(path string, item *yaml.Node, d *Domain, n *node, parent []Entry, depth int) {
	f, ok := p.fields(path, item, "key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric", ExtensionField,
		"replaces", "quota_mode", "share_threshold", "value_to_metric", "metadata")
	if !ok {
		return
	}
	for _, bad := range []string{"replaces", "quota_mode", "share_threshold", "value_to_metric", "metadata"} {
		if v, ok := f[bad]; ok {
			p.add(join(path, bad), v, "envoyproxy/ratelimit's %s is not supported by caphost", bad)
		}
	}
	var e Entry
	kn, ok := f["key"]
	if !ok {
		p.add(join(path, "key"), item, "required")
		return
	}
	key, ok := p.str(join(path, "key"), kn)
	if !ok {
		return
	}
	switch {
	case key == "":
		p.add(join(path, "key"), kn, "must not be empty")
		return
	case len(key) > MaxKeyBytes:
		p.add(join(path, "key"), kn, "%d bytes, at most %d", len(key), MaxKeyBytes)
		return
	case strings.Contains(key, "*"):
		p.add(join(path, "key"), kn, "a key may not contain *: wildcards belong in values")
		return
	}
	e.Key = key
	if vn, ok := f["value"]; ok {
		v, ok := p.str(join(path, "value"), vn)
		if !ok {
			return
		}
		if len(v) > MaxValueBytes {
			p.add(join(path, "value"), vn, "%d bytes, at most %d", len(v), MaxValueBytes)
			return
		}
		e.Value = v
	}
	next := newNode()
	if e.Value == "" {
		if _, dup := n.byKey[e.Key]; dup {
			p.add(path, item, "duplicate descriptor: key %q without a value is already defined at this level", clip(e.Key))
			return
		}
		n.byKey[e.Key] = next
	} else {
		if _, dup := n.exact[e]; dup {
			p.add(path, item, "duplicate descriptor: key %q value %q is already defined at this level", clip(e.Key), clip(e.Value))
			return
		}
		n.exact[e] = next
		if strings.Contains(e.Value, "*") {
			n.wild = append(n.wild, wildEntry{key: e.Key, parts: strings.Split(e.Value, "*"), next: next})
		}
	}
	chain := append(append([]Entry(nil), parent...), e)
	shadow := p.boolField(path, f, "shadow_mode")
	detailed := p.boolField(path, f, "detailed_metric")
	var ext *Extension
	xn, hasExt := f[ExtensionField]
	if hasExt {
		ext = p.extension(join(path, ExtensionField), xn)
	}
	if rl, ok := f["rate_limit"]; ok {
		if r, ok := p.rateLimit(join(path, "rate_limit"), rl); ok {
			r.Domain, r.Path, r.Shadow, r.DetailedMetric = d.name, chain, shadow, detailed
			r.Where = fmt.Sprintf("%s:%d: %s", p.file, item.Line, path)
			r.file, r.line, r.path = p.file, item.Line, path
			if hasExt && r.Unlimited {
				p.add(join(path, ExtensionField), xn, "an unlimited rule is never counted: caphost options would have no effect")
			}
			if ext != nil && r.Unit == Year && ext.Algorithm != "" && ext.Algorithm != policy.RateFixedWindow {
				p.add(join(join(path, "rate_limit"), "unit"), mappingValue(rl, "unit"), "%s", yearNeedsFixedWindow(ext.Algorithm, "its caphost block"))
			}
			r.Caphost = ext
			next.rule = r
			d.rules = append(d.rules, r)
		}
	} else {
		if hasExt {
			p.add(join(path, ExtensionField), xn, "needs a rate_limit on the same descriptor")
		}
		if detailed {
			// Nothing would be counted under it.
			p.add(join(path, "detailed_metric"), f["detailed_metric"], "needs a rate_limit on the same descriptor")
		}
		if shadow {
			// Shadow mode belongs to a rule: it is not inherited by the
			// descriptors below, so here it would change nothing.
			p.add(join(path, "shadow_mode"), f["shadow_mode"], "needs a rate_limit on the same descriptor")
		}
	}
	if ds, ok := f["descriptors"]; ok {
		p.descriptors(join(path, "descriptors"), ds, d, next, chain, depth+1)
	}
}

func (p *parser) rateLimit(path string, n *yaml.Node) (*Rule, bool) {
	f, ok := p.fields(path, n, "unit", "requests_per_unit", "unlimited", "name", "replaces")
	if !ok {
		return nil, false
	}
	r := &Rule{}
	good := true
	if v, ok := f["replaces"]; ok {
		p.add(join(path, "replaces"), v, "envoyproxy/ratelimit's replaces is not supported by caphost")
		good = false
	}
	r.Unlimited = p.boolField(path, f, "unlimited")
	if v, ok := f["name"]; ok {
		if s, ok := p.str(join(path, "name"), v); !ok {
			good = false
		} else if len(s) > MaxNameBytes {
			p.add(join(path, "name"), v, "%d bytes, at most %d", len(s), MaxNameBytes)
			good = false
		} else {
			r.Name = s
		}
	}
	un, hasUnit := f["unit"]
	rn, hasRPU := f["requests_per_unit"]
	if r.Unlimited {
		if hasUnit {
			p.add(join(path, "unit"), un, "not allowed with unlimited")
			good = false
		}
		if hasRPU {
			p.add(join(path, "requests_per_unit"), rn, "not allowed with unlimited")
			good = false
		}
		return r, good
	}
	if !hasUnit {
		p.add(join(path, "unit"), n, "required (or unlimited: true)")
		good = false
	} else if s, ok := p.str(join(path, "unit"), un); ok {
		// Any case, as upstream (which upper-cases the unit).
		if u, known := unitNames[strings.ToLower(s)]; known {
			r.Unit = u
		} else {
			p.add(join(path, "unit"), un, "invalid unit %q (want second, minute, hour, day, week, month or year)", clip(s))
			good = false
		}
	} else {
		good = false
	}
	if !hasRPU {
		p.add(join(path, "requests_per_unit"), n, "required (or unlimited: true)")
		good = false
	} else if rn.Kind != yaml.ScalarNode || rn.ShortTag() != "!!int" {
		p.add(join(path, "requests_per_unit"), rn, "want an integer, got %s", kindName(rn))
		good = false
	} else if v, err := strconv.ParseUint(rn.Value, 10, 32); err != nil {
		p.add(join(path, "requests_per_unit"), rn, "want a decimal integer within 0..4294967295")
		good = false
	} else {
		r.RequestsPerUnit = uint32(v)
	}
	return r, good
}

// yearNeedsFixedWindow is the problem of a year rule whose algorithm, set
// where from, is not the fixed window.
func yearNeedsFixedWindow(a policy.RateAlgorithm, from string) string {
	return fmt.Sprintf("year needs algorithm fixed-window: a year is 365 days, and %s (from %s) takes windows of at most 30 days", a, from)
}

// mappingValue is the value node of key in the mapping n (n itself when
// there is none, so a problem still has a line).
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return n
}

// str reads a scalar as text. Like envoyproxy/ratelimit's YAML decoder, a
// number or boolean written without quotes is taken as its text (value:
// 200 is "200"); null is "".
func (p *parser) str(path string, n *yaml.Node) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		p.add(path, n, "want a string, got %s", kindName(n))
		return "", false
	}
	switch n.ShortTag() {
	case "!!str", "!!int", "!!float", "!!bool":
		return n.Value, true
	case "!!null":
		return "", true
	}
	p.add(path, n, "want a string, got %s", kindName(n))
	return "", false
}

func (p *parser) boolField(path string, f map[string]*yaml.Node, name string) bool {
	n, ok := f[name]
	if !ok {
		return false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		p.add(join(path, name), n, "want true or false, got %s", kindName(n))
		return false
	}
	v, _ := strconv.ParseBool(strings.ToLower(n.Value))
	return v
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		return strings.TrimPrefix(n.ShortTag(), "!!")
	}
	return "a document"
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
