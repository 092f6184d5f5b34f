package envoyrls_test

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cellserver/cellserver/envoyrls"
	"github.com/cellserver/cellserver/server"
)

// countingConn counts the bytes written on a connection.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// dialCounting is a gRPC client of addr whose connection counts the bytes
// it writes into n. HTTP/2 flow control lets a client write only what the
// server has room for: a call's bytes beyond the stream window (64 KiB)
// leave only once the server reads them.
func dialCounting(t *testing.T, addr string, n *atomic.Int64) pb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
			if err != nil {
				return nil, err
			}
			return countingConn{Conn: c, n: n}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn)
}

// TestUnauthenticatedCallNotRead: with a password, calls without the
// token that carry a 4 MB request (under gRPC's default maximum, 4 MiB)
// are refused (UNAUTHENTICATED) on their headers, before the server reads
// their message: the client could write at most a stream window of each,
// not 4 MB (it did before: the request was received and decoded, then the
// token checked).
func TestUnauthenticatedCallNotRead(t *testing.T) {
	h := startRLS(t, map[string]string{"basic.yaml": basicYAML}, func(c *server.Config) { c.Password = "s3cret" })
	var written atomic.Int64
	c := dialCounting(t, h.srv.RLSAddr().String(), &written)
	const calls, size = 8, 4_000_000
	req := request("basic", 1, []string{"key1", strings.Repeat("x", size)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			md := metadata.Pairs("authorization", "Bearer wrong")
			if i%2 == 0 {
				md = nil // no token at all
			}
			_, errs[i] = c.ShouldRateLimit(metadata.NewOutgoingContext(ctx, md), req)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("call %d: %v, want Unauthenticated", i, err)
		}
	}
	// Each call: its headers and at most one stream window of its message.
	if n, max := written.Load(), int64(calls*(envoyrls.StreamWindowBytes+16<<10)); n > max {
		t.Fatalf("the client wrote %d bytes for %d refused calls of %d bytes: the server read their messages (want at most %d)", n, calls, size, max)
	} else {
		t.Logf("the client wrote %d bytes for %d refused calls of %d bytes", n, calls, size)
	}
	if st := h.fd.Service().Stats(); st.Requests != 0 {
		t.Fatalf("the service answered %d requests", st.Requests)
	}
	// The token still works, on the same connection.
	ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer s3cret"))
	if got, err := c.ShouldRateLimit(ctx, request("basic", 1, []string{"key1", "small"})); err != nil || got.OverallCode != OK {
		t.Fatalf("with the token: %v %v", got, err)
	}
}

// TestRefusedCallsKeepNothing: calls refused for their token, each with
// a deadline of 1000 hours, leave nothing behind once refused (a
// grpc.InTapHandle refusal would keep each call's deadline timer, about
// 300 bytes, for the 1000 hours). Measured as the live heap after a GC.
func TestRefusedCallsKeepNothing(t *testing.T) {
	h := startRLS(t, map[string]string{"basic.yaml": basicYAML}, func(c *server.Config) { c.Password = "s3cret" })
	req := request("basic", 1, []string{"key1", "x"})
	refuse := func(n int) {
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), 1000*time.Hour)
			_, err := h.client.ShouldRateLimit(ctx, req)
			cancel()
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("%v, want Unauthenticated", err)
			}
		}
	}
	live := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	refuse(100) // the connection and its buffers
	const calls = 10000
	before := live()
	refuse(calls)
	grown := live() - before
	t.Logf("live heap grew by %d bytes over %d refused calls", grown, calls)
	if grown > calls*100 {
		t.Fatalf("live heap grew by %d bytes over %d refused calls (%d per call)", grown, calls, grown/calls)
	}
}

// TestRequestSizeLimit: an authenticated request larger than
// MaxRequestBytes is refused with RESOURCE_EXHAUSTED from its length
// prefix, without the server reading its body; one just under it is
// answered.
func TestRequestSizeLimit(t *testing.T) {
	h := startRLS(t, map[string]string{"basic.yaml": basicYAML}, func(c *server.Config) { c.Password = "s3cret" })
	var written atomic.Int64
	c := dialCounting(t, h.srv.RLSAddr().String(), &written)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer s3cret"))

	if got, err := c.ShouldRateLimit(ctx, request("basic", 1, []string{"key1", strings.Repeat("a", envoyrls.MaxRequestBytes-1024)})); err != nil || got.OverallCode != OK {
		t.Fatalf("a request under the limit: %v %v", got, err)
	}
	for _, size := range []int{envoyrls.MaxRequestBytes + 1, 100 << 10, 4 << 20} {
		before := written.Load()
		_, err := c.ShouldRateLimit(ctx, request("basic", 1, []string{"key1", strings.Repeat("b", size)}))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a request of %d bytes: %v, want ResourceExhausted", size, err)
		}
		if n := written.Load() - before; size > 1<<20 && n > 1<<20 {
			t.Fatalf("the client wrote %d bytes of a refused request of %d: the server read it", n, size)
		}
	}
	if st := h.fd.Service().Stats(); st.Requests != 1 {
		t.Fatalf("the service answered %d requests, want 1", st.Requests)
	}
}

// TestConnectionCap: the gRPC port serves at most --maxclients
// connections at once; the next is closed as it is accepted, and a slot
// is given back when a connection closes.
func TestConnectionCap(t *testing.T) {
	const maxClients = 2
	h := startRLS(t, map[string]string{"basic.yaml": basicYAML}, func(c *server.Config) { c.MaxClients = maxClients })
	addr := h.srv.RLSAddr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	check := func(conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
		return err
	}
	var conns []*grpc.ClientConn
	for i := 0; i <= maxClients; i++ {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns = append(conns, conn)
		err = check(conn)
		if i < maxClients && err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		if i == maxClients && status.Code(err) != codes.Unavailable {
			t.Fatalf("connection %d past maxclients %d: %v, want Unavailable", i+1, maxClients, err)
		}
	}
	// Closing one gives its slot back: the refused client, retrying, gets
	// served (wait for ready: until the deadline).
	conns[0].Close()
	if err := check(conns[maxClients], grpc.WaitForReady(true)); err != nil {
		t.Fatalf("after a connection closed: %v", err)
	}
}

// rawH2 is a client connection speaking HTTP/2 frames to the gRPC port.
type rawH2 struct {
	t        *testing.T
	c        net.Conn
	fr       *http2.Framer
	settings map[http2.SettingID]uint32
}

// dialH2 opens a connection, writes the client preface and empty
// SETTINGS, and reads the server's SETTINGS.
func dialH2(t *testing.T, addr string) *rawH2 {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(60 * time.Second)) // a bound on a hung test only
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	r := &rawH2{t: t, c: c, fr: http2.NewFramer(c, c), settings: map[http2.SettingID]uint32{}}
	if err := r.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := r.fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		t.Fatalf("first frame %v, want SETTINGS", f)
	}
	sf.ForeachSetting(func(s http2.Setting) error { r.settings[s.ID] = s.Val; return nil })
	if err := r.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	return r
}

// headers writes the HEADERS (and CONTINUATION) of a ShouldRateLimit call
// on stream id, without END_STREAM, with extra header fields.
func (r *rawH2) headers(id uint32, extra ...hpack.HeaderField) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range append([]hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{Name: ":authority", Value: "rls"}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}}, extra...) {
		enc.WriteField(f)
	}
	block := buf.Bytes()
	const chunk = 16384 // the default SETTINGS_MAX_FRAME_SIZE
	first := block[:min(chunk, len(block))]
	block = block[len(first):]
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(block) == 0}); err != nil {
		r.t.Fatal(err)
	}
	for len(block) > 0 {
		next := block[:min(chunk, len(block))]
		block = block[len(next):]
		if err := r.fr.WriteContinuation(id, len(block) == 0, next); err != nil {
			r.t.Fatal(err)
		}
	}
}

// untilPingAck writes a PING and reads frames until its ack: the server
// handles frames in order and writes its answers in order, so what it
// answered to the frames written before the PING has arrived by then. It
// returns the RST_STREAM codes by stream, and the GOAWAY if one came.
func (r *rawH2) untilPingAck() (map[uint32]http2.ErrCode, *http2.GoAwayFrame) {
	data := [8]byte{'c', 'e', 'l', 'l'}
	if err := r.fr.WritePing(false, data); err != nil {
		r.t.Fatal(err)
	}
	rst := map[uint32]http2.ErrCode{}
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			r.t.Fatalf("reading frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			rst[f.StreamID] = f.ErrCode
		case *http2.GoAwayFrame:
			return rst, f
		case *http2.PingFrame:
			if f.IsAck() && f.Data == data {
				return rst, nil
			}
		}
	}
}

// TestHTTP2Limits: the server's SETTINGS announce the limits, and it
// enforces them on a client that ignores them: the stream past
// MaxStreamsPerConn is refused (REFUSED_STREAM), a header list past
// MaxHeaderListBytes resets its stream.
func TestHTTP2Limits(t *testing.T) {
	h := startRLS(t, map[string]string{"basic.yaml": basicYAML}, nil)
	r := dialH2(t, h.srv.RLSAddr().String())
	for id, want := range map[http2.SettingID]uint32{http2.SettingMaxConcurrentStreams: envoyrls.MaxStreamsPerConn,
		http2.SettingMaxHeaderListSize: envoyrls.MaxHeaderListBytes, http2.SettingInitialWindowSize: envoyrls.StreamWindowBytes} {
		if got, ok := r.settings[id]; !ok || got != want {
			t.Errorf("SETTINGS %v = %d (sent: %v), want %d", id, got, ok, want)
		}
	}
	// Calls that wait for their request: each holds its stream.
	id := uint32(1)
	for range envoyrls.MaxStreamsPerConn + 1 {
		r.headers(id)
		id += 2
	}
	over := id - 2
	big := id
	r.headers(big, hpack.HeaderField{Name: "x-big", Value: strings.Repeat("h", envoyrls.MaxHeaderListBytes)})
	rst, goaway := r.untilPingAck()
	if goaway != nil {
		t.Fatalf("GOAWAY %v", goaway)
	}
	if code, ok := rst[over]; !ok || code != http2.ErrCodeRefusedStream {
		t.Errorf("stream %d (call %d): RST_STREAM %v (sent: %v), want REFUSED_STREAM", over, envoyrls.MaxStreamsPerConn+1, code, ok)
	}
	if _, ok := rst[big]; !ok {
		t.Errorf("stream %d with a header list over %d bytes was not reset", big, envoyrls.MaxHeaderListBytes)
	}
	if len(rst) != 2 {
		t.Errorf("RST_STREAM %v, want streams %d and %d only", rst, over, big)
	}
}

// TestPingFlood: a client that pings more often than KeepaliveMinTime
// gets GOAWAY ENHANCE_YOUR_CALM "too_many_pings" (gRPC's default policy
// did this too, with 5 minutes; this keeps it at the shorter interval).
func TestPingFlood(t *testing.T) {
	h := startRLS(t, map[string]string{"basic.yaml": basicYAML}, nil)
	r := dialH2(t, h.srv.RLSAddr().String())
	for i := range 5 {
		if err := r.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	_, goaway := r.untilPingAck()
	if goaway == nil || goaway.ErrCode != http2.ErrCodeEnhanceYourCalm || string(goaway.DebugData()) != "too_many_pings" {
		t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM too_many_pings", goaway)
	}
}
