// Package policy reads cellserver's policy file: named rate limits that
// CL.APPLY applies to a key, so callers name a policy instead of passing
// the numbers with every call. It is pure: it parses and validates, and
// the commands package evaluates.
//
// # Format
//
// A YAML mapping with one key, policies, a list of policies:
//
//	policies:
//	  - name: api                # letters, digits, '_', '-', '.'; at most 64 bytes
//	    algorithm: gcra          # CL.THROTTLE: burst (default 0), count, period
//	    burst: 15
//	    count: 30
//	    period: 1m               # 60, 60s, 1m, 250ms: as the commands take a period
//	    overrides:               # the first matching glob wins
//	      - match: "tenant:big:*"
//	        count: 300           # replaces only what it names
//	  - name: login
//	    algorithm: fixed         # also sliding, sliding_log: limit, period
//	    limit: 5
//	    period: 1m
//	  - name: jobs
//	    algorithm: concurrency   # CL.ACQUIRE: limit, lease
//	    limit: 10
//	    lease: 30s
//	  - name: global
//	    algorithm: sliding
//	    limit: 10000
//	    period: 1s
//	  - name: checkout           # a hierarchy: every member or none (CL.ALL)
//	    all:
//	      - policy: global
//	        key: "global:checkout"   # a fixed key
//	      - policy: api              # key defaults to "${key}", the call's key
//	  - name: api-next
//	    algorithm: gcra
//	    count: 20
//	    period: 1m
//	    shadow: true             # evaluated and counted, never refuses
//
// A policy may audit its decisions (docs/audit.md):
//
//	policies:
//	  - name: login
//	    algorithm: fixed
//	    limit: 5
//	    period: 1m
//	    audit: limited           # off (default), limited (refusals), all
//	    audit_stream: audit:login  # the stream's key (default audit:<name>)
//	    audit_maxlen: 100000     # trimmed as XADD MAXLEN ~ (default 100000)
//	    audit_sample: 1          # the fraction kept, 0 < s <= 1 (default 1)
//
// The package only reads these fields (Policy.Audit, AuditStream,
// AuditMaxLen, AuditSample; AuditKeep draws the sample); CL.APPLY appends
// the entries.
//
// A policy may name a shadow_companion, another single-limit policy
// evaluated beside it on every call, on the key shadow_companion_key makes
// (default "${key}:shadow:<companion>"): the enforced policy's reply is
// returned, the companion's verdict only counted.
//
// # Keys
//
// A key template (a member's key, shadow_companion_key) replaces every
// "${key}" with the key CL.APPLY was called with; one without "${key}"
// names a fixed key. A member that is itself a hierarchy is flattened, its
// members' templates composed with the member's.
//
// # Validation
//
// Parse reports every problem of a file at once, each with its line and
// policy (*Error): unknown or repeated fields, unknown algorithms or
// names, missing or bad parameters, parameters of another algorithm,
// duplicate names, hierarchy cycles, two members on one key, concurrency
// policies as members or companions (a lease needs a token and a
// release), companions that are hierarchies, have a companion of their
// own or are the policy itself, bad audit fields (an unknown mode, an
// empty audit_stream or one with "${key}", audit_maxlen outside 1 to
// MaxAuditMaxLen, audit_sample outside (0, 1]), and the limits below
// (MaxPolicies, MaxOverrides, MaxMembers, MaxNameLen, MaxPatternLen,
// MaxFileBytes).
//
// # Concurrency
//
// A Set and its Policies are immutable once Parse returns (Counts are
// atomics); a reload builds a new Set and swaps it whole.
package policy
