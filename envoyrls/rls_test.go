package envoyrls_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cellserver/cellserver/envoyrls"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// t0 is on a whole minute and hour of the Unix epoch, so that the windows
// of the tests below are predictable.
var t0 = time.Unix(1_800_000_000, 0)

type rlsHarness struct {
	dir    string // the configuration directory
	fd     *envoyrls.FrontDoor
	client pb.RateLimitServiceClient
	clock  *servertest.Clock
	srv    *server.Server
	resp   string // the RESP address
}

// startRLS runs a real cellserver with the front door on 127.0.0.1:0,
// configured by files (name -> YAML) in a temporary directory, and a
// manual clock at t0.
func startRLS(t *testing.T, files map[string]string, mutate func(*server.Config)) *rlsHarness {
	t.Helper()
	dir := t.TempDir()
	for n, s := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	clock := servertest.NewClock(t0)
	h := &rlsHarness{dir: dir, clock: clock}
	cfg := server.Config{Clock: clock.Now, RLSAddr: "127.0.0.1:0", RLSConfig: dir,
		RLS: func(src server.RLSSources) (server.RLSServer, error) {
			f, err := envoyrls.NewFrontDoor(src)
			h.fd = f
			return f, err
		}}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, addr := servertest.Start(t, cfg)
	conn, err := grpc.NewClient(srv.RLSAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h.client, h.srv, h.resp = pb.NewRateLimitServiceClient(conn), srv, addr
	return h
}

// request builds a RateLimitRequest as envoyproxy/ratelimit's
// test/common.NewRateLimitRequest: one descriptor per list of key/value pairs.
func request(domain string, hits uint32, descriptors ...[]string) *pb.RateLimitRequest {
	r := &pb.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, kv := range descriptors {
		d := &rlv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		r.Descriptors = append(r.Descriptors, d)
	}
	return r
}

func status_(code pb.RateLimitResponse_Code, rpu uint32, unit pb.RateLimitResponse_RateLimit_Unit, remaining uint32, reset time.Duration) *pb.RateLimitResponse_DescriptorStatus {
	return &pb.RateLimitResponse_DescriptorStatus{Code: code,
		CurrentLimit:   &pb.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit},
		LimitRemaining: remaining, DurationUntilReset: durationpb.New(reset)}
}

func (h *rlsHarness) call(t *testing.T, req *pb.RateLimitRequest, want *pb.RateLimitResponse) *pb.RateLimitResponse {
	t.Helper()
	got, err := h.client.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	if want != nil && !proto.Equal(got, want) {
		t.Fatalf("ShouldRateLimit(%v)\n got %v\nwant %v", req, got, want)
	}
	return got
}

const (
	OK   = pb.RateLimitResponse_OK
	OVER = pb.RateLimitResponse_OVER_LIMIT
	SEC  = pb.RateLimitResponse_RateLimit_SECOND
	MIN  = pb.RateLimitResponse_RateLimit_MINUTE
	HOUR = pb.RateLimitResponse_RateLimit_HOUR
	DAY  = pb.RateLimitResponse_RateLimit_DAY
)

// The two configurations of envoyproxy/ratelimit's integration tests
// (commit f2fb15770f7fd1c88ca6c3a1b58ee513917ace96,
// test/integration/runtime/current/ratelimit/config/basic.yaml and
// another.yaml).
const basicYAML = `domain: basic
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: one_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1
`

const anotherYAML = `domain: another
descriptors:
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: key4
    rate_limit:
      unit: day
      requests_per_unit: 20
`

// TestIntegrationBasic replays testBasicBaseConfig of envoyproxy/ratelimit's
// test/integration/integration_test.go against cellserver: the unknown
// domain, one request, going over a minute limit, two descriptors at once
// and duration_until_reset counting down. With the manual clock every
// duration is exact.
func TestIntegrationBasic(t *testing.T) {
	h := startRLS(t, map[string]string{"basic.yaml": basicYAML, "another.yaml": anotherYAML}, nil)

	h.call(t, request("foo", 1, []string{"hello", "world"}), &pb.RateLimitResponse{OverallCode: OK,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: OK}}})

	h.call(t, request("basic", 1, []string{"key1", "foo"}), &pb.RateLimitResponse{OverallCode: OK,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{status_(OK, 50, SEC, 49, time.Second)}})

	for i := 0; i < 25; i++ {
		code, remaining := OK, uint32(20-(i+1))
		if i >= 20 {
			code, remaining = OVER, 0
		}
		h.call(t, request("another", 1, []string{"key2", "7"}), &pb.RateLimitResponse{OverallCode: code,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{status_(code, 20, MIN, remaining, time.Minute)}})
	}

	for i := 0; i < 15; i++ {
		code, r1, r2 := OK, uint32(20-(i+1)), uint32(10-(i+1))
		if i >= 10 {
			code, r2 = OVER, 0
		}
		h.call(t, request("another", 1, []string{"key2", "8"}, []string{"key3", "8"}), &pb.RateLimitResponse{OverallCode: code,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{status_(OK, 20, MIN, r1, time.Minute), status_(code, 10, HOUR, r2, time.Hour)}})
	}

	r1 := h.call(t, request("another", 1, []string{"key4", "durTest"}), nil)
	h.clock.Advance(2 * time.Second)
	r2 := h.call(t, request("another", 1, []string{"key4", "durTest"}), nil)
	d1, d2 := r1.Statuses[0].DurationUntilReset.AsDuration(), r2.Statuses[0].DurationUntilReset.AsDuration()
	if d1-d2 != 2*time.Second {
		t.Fatalf("duration_until_reset %v then %v two seconds later", d1, d2)
	}
	// A day window is aligned to the epoch: t0 is 20833 days and 28800 s.
	if want := 24*time.Hour - 28800*time.Second; d1 != want {
		t.Fatalf("duration_until_reset %v, want %v", d1, want)
	}

	// The counters are cellserver keys (fixed windows), readable over RESP.
	rc := redis.NewClient(&redis.Options{Addr: h.resp, DisableIdentity: true})
	defer rc.Close()
	if typ, err := rc.Type(context.Background(), "rls:another:key2=7").Result(); err != nil || typ != "fixed" {
		t.Fatalf("TYPE rls:another:key2=7 = %q, %v", typ, err)
	}
}

// exampleYAML is the rl domain of envoyproxy/ratelimit's
// examples/ratelimit/config/example.yaml (the parts replaces.sh and
// trigger-shadow-mode-key.sh exercise).
const exampleYAML = `---
domain: rl
descriptors:
  - key: category
    value: account
    rate_limit:
      replaces:
        - name: bkthomps
        - name: fake_name
      unit: minute
      requests_per_unit: 4
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bkthomps
        rate_limit:
          replaces:
            - name: bkthomps
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: mock
        rate_limit:
          unit: minute
          requests_per_unit: 1
      - key: destination_cluster
        value: override
        rate_limit:
          replaces:
            - name: banned_limit
          unit: minute
          requests_per_unit: 2
      - key: destination_cluster
        value: fake
        rate_limit:
          name: fake_name
          unit: minute
          requests_per_unit: 2
  - key: foo
    rate_limit:
      unit: minute
      requests_per_unit: 2
    descriptors:
      - key: bar
        rate_limit:
          unit: minute
          requests_per_unit: 3
      - key: bar
        value: bkthomps
        rate_limit:
          name: bkthomps
          unit: minute
          requests_per_unit: 1
      - key: bar
        value: banned
        rate_limit:
          name: banned_limit
          unit: minute
          requests_per_unit: 0
      - key: baz
        value: shady
        rate_limit:
          unit: minute
          requests_per_unit: 3
        shadow_mode: true
      - key: bay
        rate_limit:
          unlimited: true
  - key: qux
    rate_limit:
      unlimited: true
`

// TestReplaces replays envoyproxy/ratelimit's
// integration-test/scripts/replaces.sh: each curl there is one request
// whose descriptors the route's rate_limits build (examples/envoy/proxy.yaml:
// /twoheader sends (foo,bar); /fourheader adds (source_cluster,
// destination_cluster); /fiveheader adds (category)); assert_ok is an
// overall OK.
func TestReplaces(t *testing.T) {
	h := startRLS(t, map[string]string{"example.yaml": exampleYAML}, nil)
	two := func(foo, bar string) [][]string { return [][]string{{"foo", foo, "bar", bar}} }
	four := func(foo, bar, dst string) [][]string {
		return append(two(foo, bar), []string{"source_cluster", "proxy", "destination_cluster", dst})
	}
	five := func(foo, bar, dst string) [][]string {
		return append(four(foo, bar, dst), []string{"category", "account"})
	}
	steps := []struct {
		d  [][]string
		ok bool
	}{
		{two("bkthomps", "banned"), false},
		{four("bkthomps", "banned", "mock"), false},
		{four("bkthomps", "banned", "override"), true},
		{four("bkthomps", "banned", "override"), true},
		{four("bkthomps", "banned", "override"), false},

		{four("my_foo", "bkthomps", "bkthomps"), true},
		{four("my_foo", "bkthomps", "bkthomps"), true},
		{four("my_foo", "bkthomps", "bkthomps"), false},
		{four("my_foo", "bkthomps", "not_bkthomps"), true},
		{four("my_foo", "bkthomps", "not_bkthomps"), false},
		{four("my_foo", "bkthomps", "bkthomps"), false},

		{five("my_foo", "bkthomps", "fake"), true},
		{five("my_foo", "bkthomps", "fake"), true},
		{five("my_foo", "bkthomps", "fake"), true},
		{five("my_foo", "bkthomps", "fake"), true},
		{five("my_foo", "bkthomps", "fake"), false},
		{two("foo_2", "bkthomps"), true},
		{two("foo_2", "bkthomps"), false},
		{four("foo_3", "bar_3", "fake"), true},
		{four("foo_3", "bar_3", "fake"), true},
		{four("foo_3", "bar_3", "fake"), false},
		{five("my_foo", "bkthomps", "fake"), false},
	}
	for i, s := range steps {
		got := h.call(t, request("rl", 0, s.d...), nil)
		if (got.OverallCode == OK) != s.ok {
			t.Fatalf("step %d %v: %v, want ok=%v", i, s.d, got, s.ok)
		}
	}
	t.Logf("%d steps of replaces.sh replayed", len(steps))
}

// TestShadowMode: README Example 6 (user-a's rule in shadow_mode, user-b's
// enforced) and the example's (foo, baz=shady) rule: shadow rules are
// counted and never make a descriptor or the request OVER_LIMIT.
func TestShadowMode(t *testing.T) {
	h := startRLS(t, map[string]string{"ex6.yaml": `domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`}, nil)
	for i := 0; i < 12; i++ {
		remaining := uint32(max(0, 10-(i+1)))
		h.call(t, request("example6", 1, []string{"service", "auth-service", "user", "user-a"}), &pb.RateLimitResponse{OverallCode: OK,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{status_(OK, 10, SEC, remaining, time.Second)}})
	}
	for i := 0; i < 21; i++ {
		code, remaining := OK, uint32(20-(i+1))
		if i == 20 {
			code, remaining = OVER, 0
		}
		h.call(t, request("example6", 1, []string{"service", "auth-service", "user", "user-b"}), &pb.RateLimitResponse{OverallCode: code,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{status_(code, 20, SEC, remaining, time.Second)}})
	}
	// A shadow descriptor over its limit beside an enforced one under it.
	got := h.call(t, request("example6", 1, []string{"service", "s", "user", "user-a"}, []string{"service", "s", "user", "user-b"}), nil)
	if got.OverallCode != OK {
		t.Fatalf("got %v", got)
	}
	// The next second is a new window.
	h.clock.Advance(time.Second)
	h.call(t, request("example6", 1, []string{"service", "auth-service", "user", "user-b"}), &pb.RateLimitResponse{OverallCode: OK,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{status_(OK, 20, SEC, 19, time.Second)}})
}

// TestShadowCounts reads the front door's counts: 2 shadow over-limit
// descriptors after 12 calls on a 10/s shadow rule.
func TestShadowCounts(t *testing.T) {
	h := startRLS(t, map[string]string{"s.yaml": "domain: s\ndescriptors:\n  - key: k\n    shadow_mode: true\n    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n"}, nil)
	c := h.client
	for i := 0; i < 12; i++ {
		r, err := c.ShouldRateLimit(context.Background(), request("s", 1, []string{"k", "v"}))
		if err != nil || r.OverallCode != OK {
			t.Fatalf("call %d: %v %v", i, r, err)
		}
	}
	st := h.fd.Service().Stats()
	if st.Requests != 12 || st.ShadowOverLimit != 2 || st.OverLimit != 0 {
		t.Fatalf("stats %+v, want 12 requests, 2 shadow over limit, 0 over limit", st)
	}
}

// TestHitsAddend: the request's hits_addend, a descriptor's own (0 only
// reads), a refund with is_negative_hits, a limit override from Envoy,
// unlimited and requests_per_unit 0.
func TestHitsAddend(t *testing.T) {
	h := startRLS(t, map[string]string{"example.yaml": exampleYAML, "basic.yaml": basicYAML, "another.yaml": anotherYAML}, nil)
	k := []string{"key2", "h"}
	h.call(t, request("another", 5, k), &pb.RateLimitResponse{OverallCode: OK,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{status_(OK, 20, MIN, 15, time.Minute)}})
	req := request("another", 5, k)
	req.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
	h.call(t, req, &pb.RateLimitResponse{OverallCode: OK,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{status_(OK, 20, MIN, 15, time.Minute)}})
	h.call(t, request("another", 15, k), &pb.RateLimitResponse{OverallCode: OK,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{status_(OK, 20, MIN, 0, time.Minute)}})
	h.call(t, request("another", 1, k), &pb.RateLimitResponse{OverallCode: OVER,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{status_(OVER, 20, MIN, 0, time.Minute)}})
	req = request("another", 3, k)
	req.Descriptors[0].IsNegativeHits = true
	h.call(t, req, &pb.RateLimitResponse{OverallCode: OK,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{status_(OK, 20, MIN, 3, time.Minute)}})

	// hits_addend 0 on a counter that does not exist yet: a read, and the
	// window's end all the same.
	req = request("another", 1, []string{"key2", "fresh"})
	req.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
	h.call(t, req, &pb.RateLimitResponse{OverallCode: OK,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{status_(OK, 20, MIN, 20, time.Minute)}})

	// Envoy's limit override: 2 per hour on this descriptor, whatever the file says.
	req = request("another", 1, []string{"key2", "o"})
	req.Descriptors[0].Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR}
	for i, code := range []pb.RateLimitResponse_Code{OK, OK, OVER} {
		got := h.call(t, req, nil)
		if got.OverallCode != code || got.Statuses[0].CurrentLimit.GetUnit() != HOUR {
			t.Fatalf("override call %d: %v", i, got)
		}
	}

	// Unlimited: OK with LimitRemaining MaxUint32 (README Example 5).
	h.call(t, request("rl", 1, []string{"qux", "x"}), &pb.RateLimitResponse{OverallCode: OK,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: OK, LimitRemaining: math.MaxUint32}}})
	// requests_per_unit 0 refuses everything.
	h.call(t, request("rl", 1, []string{"foo", "f", "bar", "banned"}), &pb.RateLimitResponse{OverallCode: OVER,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: OVER,
			CurrentLimit:       &pb.RateLimitResponse_RateLimit{Name: "banned_limit", RequestsPerUnit: 0, Unit: MIN},
			DurationUntilReset: durationpb.New(time.Minute)}}})
	// A known domain, a descriptor with no rule: OK, no limit.
	h.call(t, request("rl", 1, []string{"nothing", "here"}), &pb.RateLimitResponse{OverallCode: OK,
		Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: OK}}})
}

// TestBadRequests: envoyproxy/ratelimit's errors (TestEmptyDomain,
// TestEmptyDescriptors in test/service/ratelimit_test.go).
func TestBadRequests(t *testing.T) {
	h := startRLS(t, map[string]string{"basic.yaml": basicYAML}, nil)
	for _, tc := range []struct {
		req  *pb.RateLimitRequest
		code codes.Code
		msg  string
	}{
		{request("", 1, []string{"key1", "a"}), codes.Unknown, "rate limit domain must not be empty"},
		{request("basic", 1), codes.Unknown, "rate limit descriptor list must not be empty"},
	} {
		_, err := h.client.ShouldRateLimit(context.Background(), tc.req)
		if st, _ := status.FromError(err); st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("ShouldRateLimit(%v) = %v, want %v %q", tc.req, err, tc.code, tc.msg)
		}
	}
}

// TestToken: with --requirepass, a call needs "authorization: Bearer
// <password>"; the front door itself authenticates on the RESP port.
func TestToken(t *testing.T) {
	h := startRLS(t, map[string]string{"basic.yaml": basicYAML}, func(c *server.Config) { c.Password = "s3cret" })
	req := request("basic", 1, []string{"key1", "a"})
	for _, md := range []metadata.MD{nil, metadata.Pairs("authorization", "Bearer wrong"), metadata.Pairs("authorization", "s3cret")} {
		ctx := metadata.NewOutgoingContext(context.Background(), md)
		if _, err := h.client.ShouldRateLimit(ctx, req); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("metadata %v: got %v, want Unauthenticated", md, err)
		}
	}
	ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", "Bearer s3cret"))
	got, err := h.client.ShouldRateLimit(ctx, req)
	if err != nil || got.OverallCode != OK || got.Statuses[0].LimitRemaining != 49 {
		t.Fatalf("with the token: %v %v", got, err)
	}
}

// TestResponseHeaders: --rls-response-headers adds envoyproxy/ratelimit's
// RateLimit-Limit/-Remaining/-Reset of the descriptor closest to its limit
// (the over-limit one when there is one), as in its
// TestServiceWithDefaultRatelimitHeaders.
func TestResponseHeaders(t *testing.T) {
	h := startRLS(t, map[string]string{"another.yaml": anotherYAML}, func(c *server.Config) { c.RLSResponseHeaders = true })
	h.clock.Advance(2 * time.Second)
	hdr := func(r *pb.RateLimitResponse) string {
		var parts []string
		for _, v := range r.ResponseHeadersToAdd {
			parts = append(parts, v.Key+": "+v.Value)
		}
		return strings.Join(parts, ", ")
	}
	got := h.call(t, request("another", 1, []string{"key2", "a"}, []string{"key3", "a"}), nil)
	if want := "RateLimit-Limit: 10, RateLimit-Remaining: 9, RateLimit-Reset: 3598"; hdr(got) != want {
		t.Fatalf("headers %q, want %q", hdr(got), want)
	}
	got = h.call(t, request("another", 10, []string{"key2", "a"}, []string{"key3", "a"}), nil)
	if want := "RateLimit-Limit: 10, RateLimit-Remaining: 0, RateLimit-Reset: 3598"; hdr(got) != want || got.OverallCode != OVER {
		t.Fatalf("headers %q (%v), want %q", hdr(got), got.OverallCode, want)
	}
	// No header when no descriptor has a limit.
	got = h.call(t, request("another", 1, []string{"none", "a"}), nil)
	if len(got.ResponseHeadersToAdd) != 0 {
		t.Fatalf("headers %v for a descriptor without a rule", got.ResponseHeadersToAdd)
	}
}

// TestExtensionAlgorithms: a GCRA rule with a burst, and a sliding window
// of 250ms.
func TestExtensionAlgorithms(t *testing.T) {
	h := startRLS(t, map[string]string{"x.yaml": `domain: x
descriptors:
  - key: g
    rate_limit:
      algorithm: gcra
      burst: 2
      requests_per_unit: 1
      unit: second
  - key: s
    rate_limit:
      algorithm: sliding
      period: 250ms
      requests_per_unit: 2
`}, nil)
	var codes_ []string
	for i := 0; i < 4; i++ {
		codes_ = append(codes_, h.call(t, request("x", 1, []string{"g", "1"}), nil).OverallCode.String())
	}
	if got := strings.Join(codes_, ","); got != "OK,OK,OK,OVER_LIMIT" {
		t.Fatalf("gcra burst 2: %s", got)
	}
	got := h.call(t, request("x", 2, []string{"s", "1"}), nil)
	if got.OverallCode != OK || got.Statuses[0].CurrentLimit.Unit != pb.RateLimitResponse_RateLimit_UNKNOWN ||
		got.Statuses[0].DurationUntilReset.AsDuration() != 500*time.Millisecond { // a sliding key is empty two periods on
		t.Fatalf("sliding: %v", got)
	}
	if got := h.call(t, request("x", 1, []string{"s", "1"}), nil); got.OverallCode != OVER {
		t.Fatalf("sliding over: %v", got)
	}
	rc := redis.NewClient(&redis.Options{Addr: h.resp, DisableIdentity: true})
	defer rc.Close()
	if typ, _ := rc.Type(context.Background(), "rls:x:s=1|sliding").Result(); typ != "sliding" {
		t.Fatalf("TYPE = %q", typ)
	}
}

// TestBadConfigRefusesStart: an invalid configuration stops the server
// from listening, with every problem listed.
func TestBadConfigRefusesStart(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("domain: a\n"), 0o600)
	s, err := server.New(server.Config{Addr: "127.0.0.1:0", RLSAddr: "127.0.0.1:0", RLSConfig: dir, RLS: envoyrls.New})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Listen()
	if err == nil || !strings.Contains(err.Error(), "invalid rate limit unit 'fortnight'") ||
		!strings.Contains(err.Error(), "duplicate domain 'a'") {
		t.Fatalf("Listen: %v", err)
	}
	if err := (server.Config{RLSAddr: "127.0.0.1:0"}).Validate(); err == nil || !strings.Contains(err.Error(), "needs rls-config") {
		t.Fatalf("Validate: %v", err)
	}
}

// TestReload: a new configuration applies to the next call; an invalid
// one is refused and the old one stays.
func TestReload(t *testing.T) {
	h := startRLS(t, map[string]string{"r.yaml": "domain: r\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n"}, nil)
	file := filepath.Join(h.dir, "r.yaml")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, fd, srv := h.client, h.fd, h.srv
	remaining := func() uint32 {
		r, err := c.ShouldRateLimit(context.Background(), request("r", 1, []string{"k", "v"}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Statuses[0].LimitRemaining
	}
	if got := remaining(); got != 4 {
		t.Fatalf("remaining %d, want 4", got)
	}
	write("domain: r\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 50\n")
	if err := fd.Reload(h.dir); err != nil {
		t.Fatal(err)
	}
	if got := remaining(); got != 48 { // the counter is kept: 2 of 50
		t.Fatalf("remaining %d after reload, want 48", got)
	}
	write("domain: r\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n")
	if err := srv.ReloadRLS(); err == nil || !strings.Contains(err.Error(), "fortnight") {
		t.Fatal("an invalid configuration was loaded")
	}
	if got := remaining(); got != 47 {
		t.Fatalf("remaining %d after a refused reload, want 47", got)
	}
}

// TestQuotaMode: quota_mode descriptors make the request OVER_LIMIT only
// when all of them are over (envoyproxy/ratelimit's
// TestServiceQuotaModeOnlySomeOverTheLimit / AllOverTheLimit).
func TestQuotaMode(t *testing.T) {
	h := startRLS(t, map[string]string{"q.yaml": `domain: q
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: service
    value: service_2
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
`}, nil)
	both := request("q", 1, []string{"service", "service_1"}, []string{"service", "service_2"})
	for i, want := range []pb.RateLimitResponse_Code{OK, OK, OVER} {
		got := h.call(t, both, nil)
		if got.OverallCode != want {
			t.Fatalf("call %d: %v, want %v", i, got, want)
		}
		if i == 1 && got.Statuses[0].Code != OVER {
			t.Fatalf("call 1: service_1 should be over: %v", got)
		}
	}
}
