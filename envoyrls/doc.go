// Package envoyrls is cellserver's second front door: Envoy's rate limit
// service (gRPC envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit),
// configured in envoyproxy/ratelimit's own YAML format and counting in
// cellserver's keyspace through cellserver's own commands.
//
// # Model
//
// A Config holds domains; each domain is a tree of descriptors (key, or
// key and value) with an optional rate_limit at any node. A request names
// a domain and carries descriptors, each an ordered list of key/value
// entries. Lookup finds each descriptor's rule exactly as envoyproxy/ratelimit
// does (src/config/config_impl.go GetLimit): at each level the child
// "key_value" first, then the first wildcard child whose pattern ("*"
// matches any run of bytes, anywhere in the value) matches, then the child
// "key" alone; the rule counts only if it sits at the descriptor's last
// entry. A descriptor without a rule, or of an unknown domain, is answered
// OK with no current_limit, as there.
//
// The Service charges one counter per descriptor with its hits_addend
// (the descriptor's own when set, 0 meaning "only read"; else the
// request's, 0 meaning 1; is_negative_hits refunds). Rules named in another
// matched rule's replaces are neither charged nor reported; unlimited rules
// are answered OK with limit_remaining 4294967295 without touching the
// keyspace; shadow_mode rules are charged and counted (Stats) but their
// status stays OK; quota_mode rules make the request OVER_LIMIT only when
// every quota descriptor of the request is over. The overall code is
// OVER_LIMIT if any other descriptor is over.
//
// # Counters
//
// A counter is a cellserver key, rls:<domain>:<key1>=<value1>:..., with
// '%', ':', '=', '|', '{' and '}' percent-encoded in every part (no caller
// can pick a cluster hash tag), and "|gcra", "|sliding" or "|slidinglog"
// appended for the extension algorithms. A share_threshold wildcard keys by
// its pattern instead of the value. The fixed window is CL.FIXED with the
// unit as its period: windows aligned to multiples of the unit since the
// Unix epoch, as envoyproxy/ratelimit's (now/unit)*unit cache keys, a month
// being 30 days and a year 365. duration_until_reset is whole seconds, as
// there (milliseconds for an extension period that is not whole seconds).
//
// # Atomicity
//
// Descriptors are charged independently, as envoyproxy/ratelimit's
// INCRBY per descriptor: a request refused by one descriptor is still
// charged on the others. The commands of one request run one after the
// other and their replies leave together, as a pipeline's.
//
// # In process
//
// The front door built by New decides with a LocalStore: each command
// runs through the server's own dispatcher (server.RLSSources.Local, a
// commands.Local), as a RESP connection's command authenticated as the
// call's user, with the same checks, locks, journal (replicas, the change
// log), --sync-replicas wait and fsync, and no loopback round trip. In
// cluster mode a command answered MOVED, ASK, TRYAGAIN or CLUSTERDOWN (not
// run) goes again through the go-redis cluster client (RedisStore), to
// the node that owns its key. The gRPC handler reuses each call's buffers
// and response (answer); a call of one descriptor allocates about what
// grpc-go itself does.
//
// # Differences from envoyproxy/ratelimit
//
// A refused request consumes nothing on its own counter (CL.FIXED refuses
// without counting), where envoyproxy/ratelimit's INCRBY counts it: after a
// request of hits_addend 5 refused with 3 left, the next request of 1 is
// allowed here and refused there. requests_per_unit 0 refuses every
// request of at least one hit without a counter. value_to_metric and
// metadata are read and validated but have no effect (no dynamic metadata
// in responses yet). There is no local over-limit cache, no global
// SHADOW_MODE and no xDS configuration.
//
// # Counts
//
// Service.Stats counts the requests (OK, OVER_LIMIT, error) and, for each
// configured domain, the descriptors of the requests answered without
// error by outcome: within_limit, over_limit, shadow_over_limit, unlimited,
// replaced, no_rule (descriptors count, not hits: hits_addend is not
// summed). A rule with detailed_metric: true gets the same counts of its
// own, named by its full key. envoyproxy/ratelimit keeps stats for every
// rule and, with detailed_metric, names them by the request's values, a
// cardinality without bound; cellserver's names come from the
// configuration only (domains, and the full keys of the rules that ask),
// so the series are bounded by the configuration. The counts of a domain
// or a rule that a reload keeps go on. cellserver exports them as the
// Prometheus metrics cellserver_rls_requests_total{result},
// cellserver_rls_descriptors_total{domain,result} and
// cellserver_rls_rule_descriptors_total{domain,rule,result}, and as INFO
// rls. near_limit is not counted.
//
// # Limits
//
// The gRPC port's limits are constants (MaxRequestBytes,
// MaxStreamsPerConn, ...), set as grpc.ServerOptions; the front door
// serves at most server.RLSSources.MaxClients connections at once. With a
// password, ShouldRateLimit checks the token on the call's headers before
// it reads the request.
//
// # Users
//
// A call carrying "authorization: Basic base64(user:password)" runs as
// that ACL user: its password is checked on the server before the request
// is read (UserClients: one client per user, at most MaxUsers users and
// UserPoolSize connections each, a password checked again after
// UserRecheck), the user travels with the call's context (WithUser) and
// the Store runs the call's commands as that user (LocalStore on
// in-process clients authenticated as the user, RedisStore through the
// user's client). A
// counter outside the user's key patterns makes the call PermissionDenied
// (NOPERM), a refused password Unauthenticated (WRONGPASS).
//
// # Extensions
//
// A rate_limit may say algorithm: fixed (the default), sliding,
// slidinglog or gcra (with burst: the extra requests allowed at once,
// CL.THROTTLE's max_burst), and period: any duration of whole
// milliseconds up to 10 years instead of unit (whole seconds for gcra).
// Such a configuration no longer loads in envoyproxy/ratelimit.
//
// A rate_limit may also audit its decisions as a policy does (audit,
// audit_stream, audit_maxlen, audit_sample: Rule.Audit, docs/audit.md):
// the in-process store runs such a rule's command through
// commands.Local.SendAudited, which appends the decision to the stream
// under the command's own shard locks; the entries' client field is the
// gRPC caller's address. Refused in cluster mode.
package envoyrls
