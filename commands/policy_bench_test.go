package commands_test

import (
	"io"
	"log/slog"
	"strconv"
	"testing"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/policy"
)

// BenchmarkApply compares CL.APPLY with the direct command it stands for,
// through ServeRESP as BenchmarkDispatchThrottle: each pair runs one after
// the other, so -count=N interleaves them (compare direct with apply of
// the same case). Cases: hot (one key past its burst: the refused path),
// keys1024 (1024 keys in turn), over GCRA and the fixed window; override
// is CL.APPLY on a policy with 10 overrides none of which matches (the
// cost of trying them).
func BenchmarkApply(b *testing.B) {
	set, err := policy.Parse([]byte(`policies:
  - {name: api, algorithm: gcra, burst: 15, count: 30, period: 60}
  - {name: win, algorithm: fixed, limit: 30, period: 60}
  - name: ov
    algorithm: gcra
    burst: 15
    count: 30
    period: 60
    overrides:
      - {match: "tenant:0:*", count: 1}
      - {match: "tenant:1:*", count: 1}
      - {match: "tenant:2:*", count: 1}
      - {match: "tenant:3:*", count: 1}
      - {match: "tenant:4:*", count: 1}
      - {match: "tenant:5:*", count: 1}
      - {match: "tenant:6:*", count: 1}
      - {match: "tenant:7:*", count: 1}
      - {match: "tenant:8:*", count: 1}
      - {match: "tenant:9:*", count: 1}
`))
	if err != nil {
		b.Fatal(err)
	}
	keys := func(n int, f func(k string) []string) [][]string {
		cmds := make([][]string, n)
		for i := range cmds {
			cmds[i] = f("bench:key:" + strconv.Itoa(i))
		}
		return cmds
	}
	for _, c := range []struct {
		name           string
		direct, policy [][]string
	}{
		{"gcra-hot", [][]string{{"CL.THROTTLE", "bench:hot", "15", "30", "60"}}, [][]string{{"CL.APPLY", "bench:hot", "api"}}},
		{"gcra-keys1024",
			keys(1024, func(k string) []string { return []string{"CL.THROTTLE", k, "15", "30", "60"} }),
			keys(1024, func(k string) []string { return []string{"CL.APPLY", k, "api"} })},
		{"fixed-keys1024",
			keys(1024, func(k string) []string { return []string{"CL.FIXED", k, "30", "60"} }),
			keys(1024, func(k string) []string { return []string{"CL.APPLY", k, "win"} })},
		{"override-miss-keys1024",
			keys(1024, func(k string) []string { return []string{"CL.THROTTLE", k, "15", "30", "60"} }),
			keys(1024, func(k string) []string { return []string{"CL.APPLY", k, "ov"} })},
	} {
		b.Run(c.name+"/direct", func(b *testing.B) { benchDispatch(b, c.direct) })
		b.Run(c.name+"/apply", func(b *testing.B) { benchPolicies(b, set, c.policy) })
	}
}

func benchPolicies(b *testing.B, set *policy.Set, cmds [][]string) {
	srv, err := commands.New(commands.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Policies: set})
	if err != nil {
		b.Fatal(err)
	}
	benchOn(b, srv, cmds)
}

// BenchmarkApplyAudit is CL.APPLY's audited decision path through
// ServeRESP: 1024 keys in turn, every tenth call refused (a quantity past
// the limit), on three policies alike but for audit: off, limited (one
// entry per refusal) and all (one entry per call). The three run one
// after the other, so -count=N interleaves them; bench/audit.sh measures
// the same over the network.
func BenchmarkApplyAudit(b *testing.B) {
	set, err := policy.Parse([]byte(`policies:
  - {name: off, algorithm: fixed, limit: 1000000000, period: 1h}
  - {name: limited, algorithm: fixed, limit: 1000000000, period: 1h, audit: limited}
  - {name: all, algorithm: fixed, limit: 1000000000, period: 1h, audit: all}
`))
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"off", "limited", "all"} {
		cmds := make([][]string, 1024)
		for i := range cmds {
			cmds[i] = []string{"CL.APPLY", "bench:key:" + strconv.Itoa(i), mode}
			if i%10 == 9 {
				cmds[i] = append(cmds[i], "2000000000") // past the limit: refused
			}
		}
		b.Run("audit="+mode, func(b *testing.B) { benchPolicies(b, set, cmds) })
	}
}
