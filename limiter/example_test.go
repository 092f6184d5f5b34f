package limiter_test

import (
	"fmt"
	"time"

	"github.com/cellserver/cellserver/limiter"
)

// A fixed window of 3 units per second: the caller keeps the state Fixed
// returns when store is true, and passes in the instant (ns) of each
// request. RetryAfter is -1 when the request was admitted.
func ExampleFixed() {
	const second = int64(1e9)
	var st limiter.FixedState
	exists := false
	for _, now := range []int64{0, 100e6, 200e6, 300e6, second} {
		next, d, store, _ := limiter.Fixed(st, exists, now, limiter.Rule{Limit: 3, Period: second}, 1)
		if store {
			st, exists = next, true
		}
		fmt.Printf("t=%4dms limited=%v remaining=%d retry_after=%v\n", now/1e6, d.Limited, d.Remaining, time.Duration(d.RetryAfter))
	}
	// Output:
	// t=   0ms limited=false remaining=2 retry_after=-1ns
	// t= 100ms limited=false remaining=1 retry_after=-1ns
	// t= 200ms limited=false remaining=0 retry_after=-1ns
	// t= 300ms limited=true remaining=0 retry_after=700ms
	// t=1000ms limited=false remaining=2 retry_after=-1ns
}
