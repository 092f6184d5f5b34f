package envoyrls_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/envoyrls"
	"github.com/cellserver/cellserver/server"
)

// Issue #31: a rate_limit rule's audit (audit, audit_stream, audit_maxlen,
// audit_sample), as a policy's.

const auditYAML = `domain: aud
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, audit: limited}
  - key: all
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 1, audit: all, audit_stream: "log:all"}
  - key: shadow
    rate_limit: {algorithm: sliding, unit: minute, requests_per_unit: 1, audit: limited}
    shadow_mode: true
  - key: quiet
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// entriesOf reads a stream over RESP, each entry "id f v f v ...".
func entriesOf(t *testing.T, rdb *redis.Client, key string) []string {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", key, err)
	}
	var out []string
	for _, m := range msgs {
		e := m.ID
		for _, f := range []string{"key", "policy", "decision", "remaining", "retry_after_ms", "quantity", "client"} {
			v, _ := m.Values[f].(string)
			if f == "client" && strings.HasPrefix(v, "127.0.0.1:") {
				v = "<set>" // the gRPC caller's address
			}
			e += " " + f + "=" + v
		}
		out = append(out, e)
	}
	return out
}

// TestRuleAudit: a rule with audit: limited appends its refusals to
// audit:<full key>, audit: all every decision to its audit_stream (a
// GCRA rule: CL.THROTTLE's decision), a shadow_mode rule's refusal is
// shadow_limited (its descriptor answered OK), a rule without audit
// appends nothing. Decided in process: the entry is written with the
// counter, by the same command.
func TestRuleAudit(t *testing.T) {
	h := startRLS(t, map[string]string{"aud.yaml": auditYAML}, nil)
	rdb := redis.NewClient(&redis.Options{Addr: h.resp, Protocol: 2})
	defer rdb.Close()
	for range 3 {
		h.call(t, request("aud", 1, []string{"user", "u1"}), nil)
		h.call(t, request("aud", 1, []string{"all", "a"}), nil)
		h.call(t, request("aud", 1, []string{"shadow", "s"}), nil)
		h.call(t, request("aud", 1, []string{"quiet", "q"}), nil)
	}
	ms := fmt.Sprint(t0.UnixMilli())
	want := map[string][]string{
		"audit:aud.user": {
			ms + "-0 key=rls:aud:user=u1 policy=aud.user decision=limited remaining=0 retry_after_ms=60000 quantity=1 client=<set>"},
		"log:all": {
			ms + "-0 key=rls:aud:all=a|gcra policy=aud.all decision=allowed remaining=0 retry_after_ms=-1 quantity=1 client=<set>",
			ms + "-1 key=rls:aud:all=a|gcra policy=aud.all decision=limited remaining=0 retry_after_ms=1000 quantity=1 client=<set>",
			ms + "-2 key=rls:aud:all=a|gcra policy=aud.all decision=limited remaining=0 retry_after_ms=1000 quantity=1 client=<set>"},
		"audit:aud.shadow": {
			ms + "-0 key=rls:aud:shadow=s|sliding policy=aud.shadow decision=shadow_limited remaining=0 retry_after_ms=120000 quantity=1 client=<set>",
			ms + "-1 key=rls:aud:shadow=s|sliding policy=aud.shadow decision=shadow_limited remaining=0 retry_after_ms=120000 quantity=1 client=<set>"},
	}
	for key, w := range want {
		if have := entriesOf(t, rdb, key); strings.Join(have, "\n") != strings.Join(w, "\n") {
			t.Errorf("%s holds\n%s\nwant\n%s", key, strings.Join(have, "\n"), strings.Join(w, "\n"))
		}
	}
	if n := rdb.Exists(context.Background(), "audit:aud.quiet").Val(); n != 0 {
		t.Errorf("a rule without audit made a stream")
	}
	info := rdb.Info(context.Background(), "policies").Val()
	if !strings.Contains(info, "rls_audit:appended=6,dropped_wrongtype=0,dropped_oom=0,dropped_id=0") {
		t.Errorf("INFO policies: %q", info)
	}
}

// TestRuleAuditConfig: the audit fields are validated as a policy's, an
// unlimited rule takes no audit, and a configuration with audit is
// refused in cluster mode.
func TestRuleAuditConfig(t *testing.T) {
	_, err := envoyrls.Parse(envoyrls.File{Name: "a.yaml", Data: []byte(`domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, audit: sometimes, audit_maxlen: 0, audit_sample: 2}
  - key: b
    rate_limit: {unlimited: true, audit: all}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 1, audit: all, audit_stream: "x:${key}"}
`)})
	for _, want := range []string{
		`a.yaml: audit must be off, limited or all, not "sometimes", at 'd.a'`,
		`a.yaml: audit_maxlen must be an integer within 1 and 1000000000, not "0", at 'd.a'`,
		`a.yaml: audit_sample must be a number within 0 (excluded) and 1, not "2", at 'd.a'`,
		`a.yaml: audit does not apply to an unlimited rule (it decides nothing), at 'd.b'`,
		`a.yaml: audit_stream is one key for the whole policy: it takes no "${key}", at 'd.c'`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	cfg, err := envoyrls.Parse(envoyrls.File{Name: "a.yaml", Data: []byte(auditYAML)})
	if err != nil || !cfg.Audits() {
		t.Fatalf("%v, audits %v", err, cfg != nil && cfg.Audits())
	}
	file := filepath.Join(t.TempDir(), "aud.yaml")
	if err := os.WriteFile(file, []byte(auditYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = envoyrls.NewFrontDoor(server.RLSSources{Cluster: true, ConfigPath: file, RESPAddr: "127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "audit is not available in cluster mode") {
		t.Fatalf("cluster mode: %v", err)
	}
}
