package envoyrls

import "time"

// SetUserLimits sets what MaxUsers and UserRecheck set, for tests; call
// it before the first call that carries a user.
func (uc *UserClients) SetUserLimits(maxUsers int, recheck time.Duration) {
	uc.mu.Lock()
	defer uc.mu.Unlock()
	uc.max, uc.recheck = maxUsers, recheck
}

// ParseBasic is parseBasic, for tests.
var ParseBasic = parseBasic
