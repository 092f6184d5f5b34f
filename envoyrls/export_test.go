package envoyrls

import (
	"context"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// SetUserLimits sets what MaxUsers and UserRecheck set, for tests; call
// it before the first call that carries a user.
func (uc *UserClients) SetUserLimits(maxUsers int, recheck time.Duration) {
	uc.mu.Lock()
	defer uc.mu.Unlock()
	uc.max, uc.recheck = maxUsers, recheck
}

// ParseBasic is parseBasic, for tests.
var ParseBasic = parseBasic

// AnswerAllocs is testing.AllocsPerRun(runs) of the gRPC handler's
// answering of req once decoded: Service.answer with one answer, reused
// from call to call as the handler's pool hands them back. It reports the
// first error a call returned.
func (f *FrontDoor) AnswerAllocs(req *pb.RateLimitRequest, runs int) (float64, error) {
	a := new(answer)
	var first error
	n := testing.AllocsPerRun(runs, func() {
		if _, err := f.service.answer(context.Background(), req, a); err != nil && first == nil {
			first = err
		}
	})
	return n, first
}
