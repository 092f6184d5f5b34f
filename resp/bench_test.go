package resp

import (
	"bytes"
	"io"
	"strconv"
	"testing"
	"time"
)

// pongHandler answers every command with +PONG.
type pongHandler struct{}

func (pongHandler) Open(*Conn)  {}
func (pongHandler) Close(*Conn) {}
func (pongHandler) ServeRESP(c *Conn, args [][]byte) {
	c.Out = append(c.Out, "+PONG\r\n"...)
}

// BenchmarkPipeline measures a loopback round trip of a pipeline of PING
// commands: one write from the client, one batch and one write on the
// server. An op is one pipeline.
func BenchmarkPipeline(b *testing.B) {
	for _, depth := range []int{1, 16} {
		b.Run("depth="+itoa(depth), func(b *testing.B) {
			_, addr := startServer(b, Config{}, pongHandler{})
			c := dial(b, addr)
			c.SetDeadline(timeZero)
			req := bytes.Repeat([]byte("*1\r\n$4\r\nPING\r\n"), depth)
			resp := make([]byte, depth*len("+PONG\r\n"))
			b.SetBytes(int64(len(req)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, resp); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*depth), "ns/cmd")
		})
	}
}

// BenchmarkReader measures parsing alone: 16 pipelined commands from
// memory. An op is one pipeline.
func BenchmarkReader(b *testing.B) {
	req := bytes.Repeat([]byte("*3\r\n$3\r\nSET\r\n$8\r\nuser:123\r\n$5\r\nvalue\r\n"), 16)
	r := newTestReader(limits{})
	var src bytes.Reader
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(req)
		r.fill(&src)
		for n := 0; ; n++ {
			args, err := r.next()
			if err != nil {
				b.Fatal(err)
			}
			if args == nil {
				if n != 16 {
					b.Fatalf("%d commands", n)
				}
				break
			}
		}
	}
}

var timeZero = time.Time{}

func itoa(n int) string { return strconv.Itoa(n) }
