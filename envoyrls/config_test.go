package envoyrls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The configurations and expectations below are transcribed from
// envoyproxy/ratelimit at commit f2fb15770f7fd1c88ca6c3a1b58ee513917ace96:
// test/config/basic_config.yaml, wildcard.yaml and config_test.go
// (TestBasicConfig, TestWildcardConfig and the error tests), and README.md
// "Examples".

const basicConfig = `# Basic configuration for testing.
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 30
  - key: key2
    value: value3
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: key4
    rate_limit:
      name: key4_rate_limit
      unit: day
      requests_per_unit: 1
  - key: key5
    value: value5
    rate_limit:
      unit: day
      requests_per_unit: 15
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit:
          unit: day
          requests_per_unit: 25
  - key: key6
    rate_limit:
      unlimited: true
  - key: key7
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 70
`

const wildcardConfig = `domain: test-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: noWild
    value: foo
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: noVal
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: midWild
    value: bar*b
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: multiWild
    value: foo*bar*baz
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit:
          unit: minute
          requests_per_unit: 20
`

func entries(kv ...string) []*rlv3.RateLimitDescriptor_Entry {
	var out []*rlv3.RateLimitDescriptor_Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

func mustParse(t *testing.T, files ...File) *Config {
	t.Helper()
	c, err := Parse(files...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type lookupCase struct {
	domain  string
	kv      []string
	fullKey string // "" when no rule applies
	rpu     uint32
	unit    pb.RateLimitResponse_RateLimit_Unit
}

func runLookups(t *testing.T, c *Config, cases []lookupCase) {
	t.Helper()
	for _, tc := range cases {
		m, ok := c.Lookup(tc.domain, entries(tc.kv...))
		if tc.fullKey == "" {
			if ok {
				t.Errorf("%s %v: matched %s, want no rule", tc.domain, tc.kv, m.Rule.FullKey)
			}
			continue
		}
		if !ok {
			t.Errorf("%s %v: no rule, want %s", tc.domain, tc.kv, tc.fullKey)
			continue
		}
		if m.Rule.FullKey != tc.fullKey || m.Rule.RequestsPerUnit != tc.rpu || m.Rule.Unit != tc.unit {
			t.Errorf("%s %v: got %s %d/%v, want %s %d/%v", tc.domain, tc.kv, m.Rule.FullKey, m.Rule.RequestsPerUnit, m.Rule.Unit,
				tc.fullKey, tc.rpu, tc.unit)
		}
	}
	t.Logf("%d lookups checked", len(cases))
}

const (
	sec  = pb.RateLimitResponse_RateLimit_SECOND
	min_ = pb.RateLimitResponse_RateLimit_MINUTE
	hour = pb.RateLimitResponse_RateLimit_HOUR
	day  = pb.RateLimitResponse_RateLimit_DAY
)

// TestBasicConfigLookups replays envoyproxy/ratelimit's TestBasicConfig.
func TestBasicConfigLookups(t *testing.T) {
	c := mustParse(t, File{Name: "basic_config.yaml", Data: []byte(basicConfig)})
	runLookups(t, c, []lookupCase{
		{domain: "foo_domain"},
		{domain: "test-domain"},
		{domain: "test-domain", kv: []string{"key1", "something"}},
		{domain: "test-domain", kv: []string{"key1", "value1"}},
		{domain: "test-domain", kv: []string{"key2", "value2", "subkey", "subvalue"}},
		{domain: "test-domain", kv: []string{"key5", "value5", "subkey5", "subvalue"}},
		{"test-domain", []string{"key1", "value1", "subkey1", "something"}, "test-domain.key1_value1.subkey1", 5, sec},
		{"test-domain", []string{"key1", "value1", "subkey1", "subvalue1"}, "test-domain.key1_value1.subkey1_subvalue1", 10, sec},
		{"test-domain", []string{"key2", "something"}, "test-domain.key2", 20, min_},
		{"test-domain", []string{"key2", "value2"}, "test-domain.key2_value2", 30, min_},
		{domain: "test-domain", kv: []string{"key2", "value3"}},
		{"test-domain", []string{"key3", "foo"}, "test-domain.key3", 1, hour},
		{"test-domain", []string{"key4", "foo"}, "test-domain.key4", 1, day},
		{"test-domain", []string{"key7", "unspecified_value"}, "test-domain.key7", 70, min_},
		{"test-domain", []string{"key5", "value5"}, "test-domain.key5_value5", 15, day},
		{"test-domain", []string{"key5", "value5", "subkey5", "subvalue5"}, "test-domain.key5_value5.subkey5_subvalue5", 25, day},
	})
	m, _ := c.Lookup("test-domain", entries("key4", "foo"))
	if m.Rule.Name != "key4_rate_limit" {
		t.Errorf("key4 name %q", m.Rule.Name)
	}
	m, ok := c.Lookup("test-domain", entries("key6", "foo"))
	if !ok || !m.Rule.Unlimited {
		t.Errorf("key6: %v %+v, want unlimited", ok, m.Rule)
	}
}

// TestWildcardLookups replays envoyproxy/ratelimit's TestWildcardConfig.
func TestWildcardLookups(t *testing.T) {
	c := mustParse(t, File{Name: "wildcard.yaml", Data: []byte(wildcardConfig)})
	d := "test-domain"
	runLookups(t, c, []lookupCase{
		{d, []string{"noVal", "foo1"}, "test-domain.noVal", 20, min_},
		{d, []string{"wild", "foo1"}, "test-domain.wild_foo*", 20, min_},
		{d, []string{"wild", "foo2"}, "test-domain.wild_foo*", 20, min_},
		{d, []string{"nestedWild", "val1", "wild", "goo2"}, "test-domain.nestedWild_val1.wild_goo*", 20, min_},
		{domain: d, kv: []string{"wild", "bar"}},
		{domain: d, kv: []string{"noWild", "foo1"}},
		{d, []string{"midWild", "barab"}, "test-domain.midWild_bar*b", 20, min_},
		{d, []string{"midWild", "bar123b"}, "test-domain.midWild_bar*b", 20, min_},
		{d, []string{"midWild", "barb"}, "test-domain.midWild_bar*b", 20, min_},
		{domain: d, kv: []string{"midWild", "bara"}},
		{domain: d, kv: []string{"midWild", "xbarb"}},
		{d, []string{"multiWild", "foo123bar456baz"}, "test-domain.multiWild_foo*bar*baz", 10, min_},
		{d, []string{"multiWild", "foobarbaz"}, "test-domain.multiWild_foo*bar*baz", 10, min_},
		{domain: d, kv: []string{"multiWild", "foo123baz"}},
		{domain: d, kv: []string{"multiWild", "bar456baz"}},
	})
}

// TestReadmeExamples: README "Example 3" (key/value before key alone) and
// "Example 4" (a rule counts only at the descriptor's depth).
func TestReadmeExamples(t *testing.T) {
	c := mustParse(t,
		File{Name: "ex3.yaml", Data: []byte(`domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`)},
		File{Name: "ex4a.yaml", Data: []byte(`domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`)},
		File{Name: "ex4b.yaml", Data: []byte(`domain: example4b
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`)})
	runLookups(t, c, []lookupCase{
		{"edge_proxy_per_ip", []string{"remote_address", "50.0.0.1"}, "edge_proxy_per_ip.remote_address", 10, sec},
		{"edge_proxy_per_ip", []string{"remote_address", "50.0.0.5"}, "edge_proxy_per_ip.remote_address_50.0.0.5", 0, sec},
		{domain: "example4", kv: []string{"key", "value", "subkey", "subvalue"}},
		{"example4b", []string{"key", "value", "subkey", "subvalue"}, "example4b.key_value.subkey", 300, sec},
	})
}

// TestConfigErrors: envoyproxy/ratelimit's error texts, and every problem
// of every file in one error.
func TestConfigErrors(t *testing.T) {
	files := []File{
		{Name: "empty_domain.yaml", Data: []byte("descriptors:\n  - key: a\n")},
		{Name: "empty_key.yaml", Data: []byte("domain: d1\ndescriptors:\n  - value: v\n")},
		{Name: "duplicate_key.yaml", Data: []byte("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n  - key: key1\n    value: value1\n")},
		{Name: "bad_limit_unit.yaml", Data: []byte("domain: d2\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: foo\n      requests_per_unit: 1\n")},
		{Name: "replaces_self.yaml", Data: []byte("domain: d3\ndescriptors:\n  - key: a\n    rate_limit:\n      name: n\n      replaces:\n        - name: n\n      unit: second\n      requests_per_unit: 1\n")},
		{Name: "replaces_empty.yaml", Data: []byte("domain: d4\ndescriptors:\n  - key: a\n    rate_limit:\n      replaces:\n        - name: \"\"\n      unit: second\n      requests_per_unit: 1\n")},
		{Name: "bad_yaml.yaml", Data: []byte("domain: [\n")},
		{Name: "misspelled_key.yaml", Data: []byte("domain: d5\ndescriptors:\n  - key: a\n    ratelimit:\n      unit: second\n")},
		{Name: "misspelled_key2.yaml", Data: []byte("domain: d6\ndescriptors:\n  - key: a\n    rate_limit:\n      requestsperunit: 1\n")},
		{Name: "non_map_list.yaml", Data: []byte("domain: d7\ndescriptors:\n  - a\n")},
		{Name: "unlimited_with_unit.yaml", Data: []byte("domain: d8\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: day\n")},
		{Name: "duplicate_domain.yaml", Data: []byte("domain: test-domain\n")},
		{Name: "share.yaml", Data: []byte("domain: d9\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n")},
		{Name: "ext.yaml", Data: []byte("domain: d10\ndescriptors:\n  - key: a\n    rate_limit:\n      algorithm: leaky\n      period: 0.5ms\n      requests_per_unit: 1\n")},
	}
	_, err := Parse(files...)
	var ce *ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, ErrConfig) {
		t.Fatalf("got %v, want a *ConfigError", err)
	}
	want := []string{
		"empty_domain.yaml: config file cannot have empty domain",
		"empty_key.yaml: descriptor has empty key",
		"duplicate_key.yaml: duplicate descriptor composite key 'test-domain.key1_value1'",
		"bad_limit_unit.yaml: invalid rate limit unit 'foo'",
		"replaces_self.yaml: replaces should not contain name of same descriptor",
		"replaces_empty.yaml: should not have an empty replaces entry",
		"bad_yaml.yaml: error loading config file: yaml:",
		"misspelled_key.yaml: config error, unknown key 'ratelimit'",
		"misspelled_key2.yaml: config error, unknown key 'requestsperunit'",
		"non_map_list.yaml: config error, yaml file contains list of type other than map: a",
		"unlimited_with_unit.yaml: should not specify rate limit unit when unlimited",
		"duplicate_domain.yaml: duplicate domain 'test-domain' in config file",
		"share.yaml: share_threshold can only be used with wildcard values (containing '*'), but found key 'a_b'",
		"ext.yaml: invalid algorithm 'leaky'",
		"ext.yaml: invalid period '0.5ms'",
	}
	all := strings.Join(ce.Problems, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("missing problem %q in:\n%s", w, all)
		}
	}
	t.Logf("%d problems reported at once", len(ce.Problems))
}

// TestLoadPathDirectory: a directory is every *.yaml/*.yml file in it,
// a duplicate domain across files is an error naming the second file.
func TestLoadPathDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: one\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n")
	write("b.yml", "domain: two\n")
	write(".hidden.yaml", "not: valid: yaml: [")
	write("notes.txt", "ignored")
	c, err := LoadPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Domains(), ","); got != "one,two" {
		t.Fatalf("domains %q", got)
	}
	write("c.yaml", "domain: one\n")
	_, err = LoadPath(dir)
	if err == nil || !strings.Contains(err.Error(), "c.yaml: duplicate domain 'one' in config file") {
		t.Fatalf("got %v", err)
	}
	if _, err := LoadPath(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Fatal("a missing file loaded")
	}
}

// TestExtensions: period, algorithm and burst.
func TestExtensions(t *testing.T) {
	c := mustParse(t, File{Name: "x.yaml", Data: []byte(`domain: x
descriptors:
  - key: a
    rate_limit:
      algorithm: gcra
      burst: 5
      requests_per_unit: 10
      unit: minute
  - key: b
    rate_limit:
      algorithm: sliding
      period: 250ms
      requests_per_unit: 3
  - key: c
    rate_limit:
      period: 1h
      requests_per_unit: 3
`)})
	m, _ := c.Lookup("x", entries("a", "1"))
	if m.Rule.Algorithm != GCRA || m.Rule.Burst != 5 || m.Rule.Period.String() != "1m0s" {
		t.Errorf("a: %+v", m.Rule)
	}
	m, _ = c.Lookup("x", entries("b", "1"))
	if m.Rule.Algorithm != Sliding || m.Rule.Period.String() != "250ms" || m.Rule.Unit != pb.RateLimitResponse_RateLimit_UNKNOWN {
		t.Errorf("b: %+v", m.Rule)
	}
	m, _ = c.Lookup("x", entries("c", "1"))
	if m.Rule.Unit != hour {
		t.Errorf("c: period 1h should report unit HOUR: %+v", m.Rule)
	}
}

func TestKeyFor(t *testing.T) {
	for _, tc := range []struct {
		domain string
		kv     []string
		a      Algorithm
		want   string
	}{
		{"mongo_cps", []string{"database", "users"}, Fixed, "rls:mongo_cps:database=users"},
		{"d", []string{"a", "x:y", "b=c", "{tag}"}, Fixed, "rls:d:a=x%3Ay:b%3Dc=%7Btag%7D"},
		{"d", []string{"a", "1"}, GCRA, "rls:d:a=1|gcra"},
		{"d|x", []string{"a", "50%"}, Sliding, "rls:d%7Cx:a=50%25|sliding"},
	} {
		e := entries(tc.kv...)
		vals := make([]string, len(e))
		for i := range e {
			vals[i] = e[i].Value
		}
		if got := KeyFor(tc.domain, e, vals, tc.a); got != tc.want {
			t.Errorf("KeyFor(%s, %v) = %q, want %q", tc.domain, tc.kv, got, tc.want)
		}
	}
}

// FuzzParse: any file is parsed or refused with a *ConfigError, never a
// panic; a parsed one answers lookups.
func FuzzParse(f *testing.F) {
	f.Add([]byte(basicConfig), "key1", "value1", "subkey1", "x")
	f.Add([]byte(wildcardConfig), "multiWild", "foo1bar2baz", "", "")
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    value: '*x*'\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra, burst: 3}\n"), "a", "yxy", "", "")
	f.Fuzz(func(t *testing.T, data []byte, k1, v1, k2, v2 string) {
		c, err := Parse(File{Name: "f.yaml", Data: data})
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("error %v is not a *ConfigError with problems", err)
			}
			return
		}
		for _, d := range c.Domains() {
			m, ok := c.Lookup(d, entries(k1, v1, k2, v2))
			if ok && (m.Rule == nil || len(m.Values) != 2) {
				t.Fatalf("match %+v", m)
			}
		}
	})
}
