package cellservertest_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cellservertest"
)

// TestLimited is the example of docs/client.md ("Testing your code against
// cellserver"), word for word: TestLimitedIsTheDocsExample checks it.
func TestLimited(t *testing.T) {
	s := cellservertest.Run(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	ctx := context.Background()
	throttle := func() int64 { // 1 request per 10 s; 1: limited
		r, err := rdb.Do(ctx, "CL.THROTTLE", "user:1", 0, 1, 10).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return r[0]
	}
	if throttle() != 0 || throttle() != 1 {
		t.Fatal("want allowed, then limited")
	}
	s.Advance(10 * time.Second) // the server's clock: nothing sleeps
	if throttle() != 0 {
		t.Fatal("want allowed 10 s later")
	}
}

// TestLimitedIsTheDocsExample: the Go block of docs/client.md's "Testing
// your code against cellserver" is TestLimited, word for word.
func TestLimitedIsTheDocsExample(t *testing.T) {
	page, err := os.ReadFile("../docs/client.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(page)
	i := strings.Index(s, "\n## Testing your code against cellserver\n")
	if i < 0 {
		t.Fatal("docs/client.md has no section \"Testing your code against cellserver\"")
	}
	s = s[i:]
	start := strings.Index(s, "```go\n")
	if start < 0 {
		t.Fatal("no go block in the section")
	}
	end := strings.Index(s[start+6:], "```")
	if end < 0 {
		t.Fatal("unterminated go block in the section")
	}
	block := s[start+6 : start+6+end]
	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "\n"+block) {
		t.Errorf("docs/client.md's example is not TestLimited word for word:\n%s", block)
	}
}
