// Package httplimit is net/http middleware that rate-limits requests
// through cellserver: one or more limits per request, decided atomically in
// one CL.ALL round trip, reported in the IETF RateLimit header fields, and
// a defined behaviour when cellserver cannot answer.
//
// # Model
//
// A [Limit] is a policy: Quota units per Window, counted per key, with one
// of four algorithms (GCRA through CL.THROTTLE, the default; fixed window;
// sliding-window counter; sliding log). Its [KeyFunc] picks the key from
// the request ([ClientIP], [Header], [Context], [Route], [Global], [Join])
// or says the limit does not apply. For each request the middleware sends
// one CL.ALL with a check per applicable limit, on the server key
// Prefix+Name+":"+key ("rl:per-ip:192.0.2.1"), each charged Options.Cost
// units (default 1). The request passes only if every check admits it; if
// one refuses, nothing is charged anywhere (CL.ALL is all or nothing), so a
// request refused by per-ip leaves the global limit untouched.
//
//	m, err := httplimit.New(client.New(rdb), httplimit.Options{
//		Limits: []httplimit.Limit{
//			{Name: "per-ip", Quota: 5, Window: 10 * time.Second, Key: httplimit.ClientIP()},
//			{Name: "global", Quota: 1000, Window: time.Second, Key: httplimit.Global()},
//		},
//	})
//	http.ListenAndServe(":8080", m.Handler(mux))
//
// GCRA admits a burst of Quota and refills Quota per Window
// (CL.THROTTLE key Quota-1 Quota Window cost); its Window must be whole
// seconds or Quota per Window must reduce to a whole count per second.
//
// # Headers
//
// As in draft-ietf-httpapi-ratelimit-headers-11 (Structured Fields lists),
// one list member per applicable limit, in Options.Limits order:
//
//	RateLimit-Policy: "per-ip";q=5;w=10, "global";q=1000;w=1
//	RateLimit: "per-ip";r=3;t=4, "global";r=998;t=1
//
// q is Quota, w is Window in seconds (rounded up), r the units remaining
// and t the seconds until the limit is back to its full quota (rounded
// up). Names are sf-strings; New accepts printable ASCII without ':' and
// escapes '"' and '\'. On a 429, Retry-After (seconds, rounded up, at least
// 1) is the longest retry among the refusing limits; the other limits of a
// refused request report r as what really remains (the server's Remaining
// assumes the charge; a refused CL.ALL charges nothing, so r is that plus
// the cost, at most the quota) and t as the server reports it. With
// LegacyHeaders, X-RateLimit-Limit, -Remaining and -Reset (seconds from
// now) describe the most restrictive limit: the refusing one, else the one
// with the fewest units left. The 429 body is written by Options.Denied,
// by default {"error":"too many requests","limit":"per-ip","retry_after":4}.
//
// Shadow mode (Options.Shadow) decides and reports every request (hook,
// Stats) and passes them all, with no RateLimit, RateLimit-Policy or
// Retry-After header: the limits are not enforced, so advertising them
// would make well-behaved clients slow down for a policy under trial and
// change the very traffic the trial measures.
//
// # Trusted proxies
//
// [ClientIP] keys by the peer address (RemoteAddr). It reads
// X-Forwarded-For only when the peer is inside one of the trusted
// prefixes given, walking it from the right past trusted hops; anyone can
// write that header, so never list a prefix clients can send from, and list
// every proxy hop of your own. It reads one header only: a proxy appending
// to X-Forwarded-For passes a client's Forwarded header through, so reading
// both would let clients pick their key. Use [ClientIPFrom]("Forwarded",
// ...) if your proxies write RFC 7239 Forwarded. [Header] keys are chosen
// by the client too: use them for values your own infrastructure sets or
// checks.
//
// # When cellserver cannot answer
//
// Every call is bounded by Options.Deadline (default 50 ms). A call that
// fails without a server reply (dial refused, connection reset, deadline)
// is answered by Options.OnError and opens a breaker: the following
// requests are decided by OnError at once, with no round trip and no wait,
// and every ProbeInterval (default 1 s, on Options.Clock) one request at a
// time probes cellserver; the first answer closes the breaker (Stats.
// Recoveries). So an outage costs at most one Deadline per request in
// flight when it starts and one per probe. The policies:
//
//   - Open (default): let requests through. The service stays up but is
//     unprotected during the outage. Only RateLimit-Policy is sent.
//   - Closed: 503 with Retry-After (the time to the next probe), written by
//     Options.Unavailable. Protects the backend, turns a limiter outage
//     into a service outage.
//   - Local: decide in process with the same algorithms (packages gcra and
//     limiter), each limit at LocalShare of its Quota (default 0.1, at
//     least 1 unit): with N processes behind a load balancer, a share of
//     1/N keeps the total near the quota. The state is kept for at most
//     LocalMaxKeys keys (default 10,000; past it an arbitrary key is
//     forgotten, and starts afresh), under one mutex taken only on this
//     path, and dropped when cellserver answers again, whose counts then
//     apply (what was admitted locally is not charged to the server).
//
// An error reply from the server (a key holding another type, a bad
// argument, CROSSSLOT, OOM) is an Error decision: counted in Stats.Errors,
// reported with the reply in Decision.Err, and the request handled by
// OnError, but the breaker stays closed (the server answers; the next
// request asks again).
//
// Every fallback decision is counted (Stats.FallbackOpen, FallbackClosed,
// FallbackLocal, LocalLimited) and reported to Options.OnDecision.
//
// # The Deadline and go-redis
//
// go-redis v9 applies context deadlines to its sockets only when the
// client is built with ContextTimeoutEnabled; otherwise a call waits for
// ReadTimeout (5 s by default in v9.23.0), and a refused dial is retried
// for about 1.5 s. When the client honours contexts (a *redis.Client,
// *redis.ClusterClient or *redis.Ring with ContextTimeoutEnabled), the call
// is made directly with a deadline. Otherwise it runs in a goroutine the
// request waits for at most Deadline; an abandoned call keeps its
// goroutine and connection until go-redis gives up, which the breaker
// limits to the requests in flight when the outage begins plus one per
// probe. The goroutine costs a hand-off per request (see Costs): build the
// client with ContextTimeoutEnabled to avoid it.
//
// # Deny cache
//
// After the server refuses a request of c units for (limit, key) with a
// retry-after T, the middleware refuses requests of at least c units on
// that (limit, key) locally until now+T, with no round trip (Stats.
// DenyCacheHits); cheaper requests still go to the server. It is exact —
// it refuses only what the server would refuse — because a refused request
// changes nothing on the server: a refused GCRA request consumes nothing,
// a refused CL.ALL charges none of its checks, and the fixed window, the
// sliding counter and the sliding log only move towards admitting by the
// passage of time, which T accounts for; requests admitted meanwhile (from
// other processes) only push the instant later. It is conservative
// (refuses what the server might admit) when an operator resets or deletes
// the key, and by the rounding of T: every check is sent with MS, so T is
// in milliseconds, rounded up, and a key may be refused up to 1 ms longer
// than the server would. Entries hold the reported remaining and reset for the
// headers of cached refusals, which list only the refusing limit.
// DenyCacheSize bounds it (default 10,000 entries, about 100 bytes each
// plus the key); a full cache evicts an expired entry among 8 seen in
// map order, else the first of them: evicting costs one round trip, never
// a wrong answer. Negative DenyCacheSize disables it.
//
// # Cluster
//
// CL.ALL's keys must hash to one slot in a cluster. With one limit there is
// nothing to do. With several, put a hash tag in Options.Prefix ("{rl}:":
// every limiter key on one shard) or have each KeyFunc return the same tag
// ("{user42}") when Prefix and Name contain no '{'. Otherwise every request
// gets CROSSSLOT, reported as an Error decision wrapping [ErrCrossSlot].
//
// # Costs
//
// Measured on a shared 2-CPU machine (load average about 1.7), in-process
// cellserver on loopback (go test -run '^$' -bench . -benchtime 20000x
// -count 5 ./tests/client/httplimit/ in the repository's root module),
// medians:
//
//	plain handler                       0.02 µs      2 B   1 alloc
//	1 limit                             34.1  µs  1,978 B  38 allocs
//	2 limits                            35.0  µs  3,143 B  50 allocs
//	1 limit, ContextTimeoutEnabled      14.0  µs  1,484 B  35 allocs
//	CL.ALL alone (Batch.Do)             12.2  µs    829 B  20 allocs
//	CL.ALL with a guard goroutine       27.1  µs  1,634 B  28 allocs
//
// The time is the round trip: the middleware's own work (keys, headers,
// the deadline's timer) is about 1.8 µs and 15 allocations (1 limit with
// ContextTimeoutEnabled against CL.ALL alone); the guard goroutine's
// hand-off costs about 15-20 µs more on this busy 2-CPU machine, which
// ContextTimeoutEnabled avoids. (The guard benchmark writes the same
// pattern around Batch.Do, from outside the package.)
//
// A flood of 10 keys at 10 times their limit (10 per 10 s each, one
// request every 10 ms of the injected clock, 20,000 requests;
// BenchmarkDenyCacheFlood, same run):
//
//	                  round trips/request   admitted/request   time/request
//	GCRA, no cache    1.000 (20,000)        0.1045             23.1 µs
//	GCRA, cache       0.204 (4,080)         0.1045              6.0 µs
//	fixed, no cache   1.000 (20,000)        0.1000             23.4 µs
//	fixed, cache      0.110 (2,200)         0.1000              3.9 µs
//
// The cache saves 80% (GCRA) and 89% (fixed window) of the round trips and
// admits exactly as many requests: what remains is the admitted requests
// plus one refusal per key each time its entry expires.
//
// # Concurrency
//
// A Middleware is safe for concurrent use. The deny cache is one map under
// one mutex, held for a lookup or an insert; the hook runs on the request's
// goroutine.
package httplimit
