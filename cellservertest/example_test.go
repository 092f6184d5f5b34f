package cellservertest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cellservertest"
)

// A limit of 5 requests per 10 s, checked at explicit instants. In a test,
// cellservertest.Run(t) does the same as Start and stops the server when
// the test ends.
func Example() {
	s, err := cellservertest.Start()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	throttle := func() {
		// max_burst 4: 5 at once, then one every 2 s.
		r, err := rdb.Do(ctx, "CL.THROTTLE", "ip:192.0.2.1", 4, 5, 10).Int64Slice()
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("limited=%d remaining=%d retry_after=%ds\n", r[0], r[2], r[3])
	}
	for range 6 {
		throttle()
	}
	s.Advance(2 * time.Second) // the server's clock: nothing sleeps
	throttle()
	// Output:
	// limited=0 remaining=4 retry_after=-1s
	// limited=0 remaining=3 retry_after=-1s
	// limited=0 remaining=2 retry_after=-1s
	// limited=0 remaining=1 retry_after=-1s
	// limited=0 remaining=0 retry_after=-1s
	// limited=1 remaining=0 retry_after=2s
	// limited=0 remaining=0 retry_after=-1s
}
