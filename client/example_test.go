package client_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/client"
)

// The README's example: three limits in one round trip, all or nothing.
// It needs a server on localhost:6379, so it is compiled, not run.
func ExampleBatch_Do() {
	ctx := context.Background()
	c := client.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	// CL.ALL: all or nothing.
	ok, res, err := c.All().
		Throttle("global", 999, client.PerSecond(1000), 1).
		Fixed("user:42", 5, time.Second, 1).
		Sliding("ip:10.0.0.1", 20, time.Minute, 1).
		Do(ctx)
	if err == nil && !ok {
		log.Printf("refused; user retry in %v", res[1].RetryAfter)
	}
}
