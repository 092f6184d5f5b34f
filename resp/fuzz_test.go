package resp

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/tidwall/redcon"
)

// fuzzLimits are small, so that the fuzzer reaches every limit.
var fuzzLimits = limits{bulk: 1 << 10, multi: 64, query: 16 << 10, inline: 256}

// FuzzReader checks that the reader never panics, that how the input is
// split into reads does not change its result, that the commands it
// accepts survive encoding and parsing again, and that it agrees with
// redcon's parser where both accept a multibulk command.
func FuzzReader(f *testing.F) {
	seeds := []string{
		validPipeline,
		"*1\r\n$4\r\nPING\r\n",
		"*2\r\n$4\r\nECHO\r\n$3\r\na\r\n\r\n",
		"*0\r\n*-1\r\nPING\r\n",
		"set \"a b\" 'c\\'d' \"\\x41\\n\" x\"y z\"\r\n",
		"\"unbalanced\r\n",
		"*1\r\nfoo\r\n",
		"*1\r\n$-1\r\n",
		"*1\r\n$3\r\nfooXY",
		"*3\n",
		"*65\r\n",
		"*1\r\n$1025\r\n",
		"*11\r\n",
		"*1\r\n$1000\r\n",
		"*2\r\n$1\r\na\r\n$1\r\nb\r\n*1\r\n$1\r\nab\r\n",
		"PING\r\n*1\r\n$4\r\nPING\r\n*x\r\nPING\r\n",
		string(bytes.Repeat([]byte("x"), 300)),
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		whole, werr := parseAll(t, newTestReader(fuzzLimits), &chunkReader{data: data})

		// Resumability: any split gives the same commands and error.
		for _, n := range []int{1, 7} {
			have, herr := parseAll(t, newTestReader(fuzzLimits), &chunkReader{data: data, n: n})
			if herr != werr || !reflect.DeepEqual(have, whole) {
				t.Fatalf("chunks of %d: %q, %q; whole: %q, %q", n, have, herr, whole, werr)
			}
		}

		// The same with the limits of a client that has not
		// authenticated.
		ur := newTestReader(fuzzLimits)
		ur.unauth = true
		uwhole, uerr := parseAll(t, ur, &chunkReader{data: data})
		ur = newTestReader(fuzzLimits)
		ur.unauth = true
		if have, herr := parseAll(t, ur, &chunkReader{data: data, n: 3}); herr != uerr || !reflect.DeepEqual(have, uwhole) {
			t.Fatalf("unauthenticated, chunks of 3: %q, %q; whole: %q, %q", have, herr, uwhole, uerr)
		}

		// Round trip: encode the accepted commands, check the encoding
		// with redcon's own parser, and parse it again.
		var enc []byte
		for _, c := range whole {
			enc = redcon.AppendArray(enc, len(c))
			for _, a := range c {
				enc = redcon.AppendBulk(enc, []byte(a))
			}
		}
		rest := enc
		for i, c := range whole {
			n, v := redcon.ReadNextRESP(rest)
			if n == 0 || v.Type != redcon.Array || v.Count != len(c) {
				t.Fatalf("command %d %q: ReadNextRESP gave %d bytes, %+v", i, c, n, v)
			}
			j := 0
			v.ForEach(func(e redcon.RESP) bool {
				if e.Type != redcon.Bulk || string(e.Data) != c[j] {
					t.Fatalf("command %d arg %d: ReadNextRESP gave %q, want %q", i, j, e.Data, c[j])
				}
				j++
				return true
			})
			rest = rest[n:]
		}
		again, aerr := parseAll(t, newTestReader(limits{}), &chunkReader{data: enc, n: 5})
		if aerr != "" || !reflect.DeepEqual(again, whole) {
			t.Fatalf("re-encoded: %q, %q; first parse: %q", again, aerr, whole)
		}

		// Independent parser: redcon's ReadNextCommand on a multibulk
		// command that both accept.
		if len(data) > 0 && data[0] == '*' && len(whole) > 0 {
			complete, args, kind, _, err := redcon.ReadNextCommand(data, nil)
			if err == nil && complete && kind == redcon.Redis && len(args) > 0 {
				want := make([]string, len(args))
				for i, a := range args {
					want[i] = string(a)
				}
				if !reflect.DeepEqual(whole[0], want) {
					t.Fatalf("first command %q, redcon: %q", whole[0], want)
				}
			}
		}
	})
}
