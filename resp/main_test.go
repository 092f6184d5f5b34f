package resp

import (
	"fmt"
	"os"
	"runtime"
	"testing"
)

// testEventLoops is the Config.EventLoops that startServer gives a test
// server whose Config leaves it zero.
var testEventLoops int

// TestMain runs the tests twice: with the default event loops (on Linux),
// then with a goroutine per connection, so both ways of serving a
// connection meet the same tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if runtime.GOOS == "linux" {
		testEventLoops = -1
		fmt.Println("resp: running the tests again with a goroutine per connection (EventLoops -1)")
		if c := m.Run(); c != 0 {
			code = c
		}
	}
	os.Exit(code)
}
