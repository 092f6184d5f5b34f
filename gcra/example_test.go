package gcra_test

import (
	"fmt"
	"time"

	"github.com/cellserver/cellserver/gcra"
)

// redis-cell's README example, CL.THROTTLE user123 15 30 60 1: a burst of
// 15 on top of 30 requests per 60 s. The caller stores the TAT Decide
// returns and passes it back on the next request.
func ExampleDecide() {
	p := gcra.Params{MaxBurst: 15, Count: 30, Period: 60, Quantity: 1}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var tat uint64
	exists := false
	for i := range 18 {
		r, err := gcra.Decide(now, tat, exists, p)
		if err != nil {
			fmt.Println(err)
			return
		}
		if r.Store {
			tat, exists = r.NewTAT, true
		}
		if i == 0 || i >= 15 {
			fmt.Printf("request %d: [%d %d %d %d %d]\n", i+1, b2i(r.Limited), r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter)
		}
	}
	// Output:
	// request 1: [0 16 15 -1 2]
	// request 16: [0 16 0 -1 32]
	// request 17: [1 16 0 2 32]
	// request 18: [1 16 0 2 32]
}

// A zero rate is the one error: ErrZeroRate.
func ExampleDecide_zeroRate() {
	_, err := gcra.Decide(0, 0, false, gcra.Params{MaxBurst: 1, Count: 0, Period: 60, Quantity: 1})
	fmt.Println(err)
	// Output:
	// gcra: zero rates are not supported
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
