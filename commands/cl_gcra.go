package commands

import (
	"strconv"

	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/keyspace"
)

// GCRA key max-burst tokens-per-period period [TOKENS count]
//
// Redis's draft GCRA command, as src/gcra.c at redis/redis commit
// 10040538b194f52abcb8032dfb60cf10ea7e3bb0: arguments are checked left to
// right with Redis's own parsers and texts, then the key is read (a plain
// string holding the TAT in microseconds, as the draft stores it; any other
// kind, CL.THROTTLE's included, is WRONGTYPE), gcra.DecideDraft runs at the
// command's millisecond, and an allowed request stores the new TAT with an
// expiry at the TAT rounded up to the millisecond.
func cmdGCRA(x *ctx) {
	args := x.args
	if len(args) > 7 {
		x.errorReply(errWrongArity("gcra"))
		return
	}
	var p gcra.DraftParams
	var ok bool
	if p.MaxBurst, ok = parseRedisInt(args[2]); !ok {
		x.errorReply(msgNotInt)
		return
	} else if p.MaxBurst < 0 {
		x.errorReply(msgGCRAPositive)
		return
	}
	if p.TokensPerPeriod, ok = parseRedisInt(args[3]); !ok {
		x.errorReply(msgNotInt)
		return
	} else if p.TokensPerPeriod < 1 {
		x.errorReply(msgGCRARange1)
		return
	}
	if p.Period, ok = parseRedisDouble(args[4]); !ok {
		x.errorReply(msgGCRANotFloat)
		return
	}
	if !(p.Period > 0 && p.Period < 1e12) {
		x.errorReply(errGCRA(gcra.ErrDraftPeriod))
		return
	}
	p.Tokens = 1
	if len(args) >= 6 {
		if !eqFold(args[5], "tokens") {
			x.errorReply(msgSyntax)
			return
		}
		if len(args) == 6 {
			x.errorReply(msgGCRAMissingCount)
			return
		}
		if p.Tokens, ok = parseRedisInt(args[6]); !ok {
			x.errorReply(msgNotInt)
			return
		} else if p.Tokens < 1 {
			x.errorReply(msgGCRARange1)
			return
		}
	}
	k := &x.keys[0]
	nowMS := x.clockMS()
	v := k.lookup(nowMS)
	var tat int64
	if v != nil {
		if v.Kind != keyspace.KindString {
			x.errorReply(msgWrongType)
			return
		}
		if tat, ok = parseRedisInt(v.Obj.([]byte)); !ok {
			x.errorReply(msgGCRAInvalidKey)
			return
		}
	}
	r, err := gcra.DecideDraft(nowMS, tat, v != nil, p)
	if err != nil {
		x.errorReply(errGCRA(err))
		return
	}
	if r.Store {
		if v == nil && !x.s.ks.CanInsert() {
			x.oom()
			return
		}
		k.replace(v, keyspace.Value{Kind: keyspace.KindString,
			Obj: strconv.AppendInt(nil, r.NewTAT, 10), Exp: r.ExpireMS})
	}
	x.decided(r.Limited, k.key)
	x.tuple(tuple{r.Limited, r.MaxTokens, r.Available, r.RetryAfter, r.FullBurstAfter})
}
