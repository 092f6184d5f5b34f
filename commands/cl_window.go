package commands

// The window limiters (package limiter): CL.FIXED, CL.SLIDING and
// CL.SLIDINGLOG key limit period [quantity] [MS]. Each is one check
// (cl_value.go) on its key.

// runCheck is the body of CL.FIXED, CL.SLIDING and CL.SLIDINGLOG: parse,
// decide and apply on the key (the dispatcher holds its shard lock),
// reply.
func runCheck(x *ctx, minArgs, maxArgs int) {
	args, ms := trailingMS(x.args[1:])
	if len(args) < minArgs || len(args) > maxArgs {
		x.errorReply(errWrongArity(x.spec.Name))
		return
	}
	var c check
	if msg := c.parse(x.spec.Name, args); msg != noErr {
		x.errorReply(msg)
		return
	}
	c.ms = ms
	if _, ok := c.run(x); ok {
		if x.cl.extAudit != nil { // an Envoy rate limit rule's (cl_audit.go)
			x.extAudit(auditDecision{key: c.key, limited: c.t.limited, shadow: x.cl.extAudit.Shadow,
				remaining: c.t.remaining, retry: c.retryMS, quantity: c.q})
		}
		x.decided(c.t.limited, c.key)
		x.tuple(c.t)
	}
}

func cmdFixed(x *ctx) { runCheck(x, 3, 4) }

func cmdSliding(x *ctx) { runCheck(x, 3, 4) }

func cmdSlidingLog(x *ctx) { runCheck(x, 3, 4) }
