package commands

// LATENCY answers as Redis 7.0 does with latency monitoring off
// (latency-monitor-threshold 0): cellserver records no latency events, so
// LATEST and HISTORY are empty, RESET resets nothing, DOCTOR says
// monitoring is off and GRAPH has no samples. HISTOGRAM reports the
// per-command latency histogram that INFO commandstats and the metrics
// endpoint use.

// cmdLatencyEmpty is LATENCY LATEST and LATENCY HISTORY <event>: no events.
func cmdLatencyEmpty(x *ctx) { x.array(0) }

// LATENCY RESET [event ...]: the number of event series reset, always 0.
func cmdLatencyReset(x *ctx) { x.int(0) }

// latencyDoctorOff is Redis 7.0's LATENCY DOCTOR report when latency
// monitoring is disabled, byte for byte.
const latencyDoctorOff = "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. " +
	"You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. " +
	"If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n"

func cmdLatencyDoctor(x *ctx) { x.verbatim(latencyDoctorOff) }

// LATENCY GRAPH <event>: no event has samples.
func cmdLatencyGraph(x *ctx) {
	x.errorReply(errLatencyGraph(x.args[2]))
}

func cmdLatencyHelp(x *ctx) {
	helpReply(x,
		"LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"DOCTOR",
		"    Return a human readable latency analysis report.",
		"GRAPH <event>",
		"    Return an ASCII latency graph for the <event> class.",
		"HISTORY <event>",
		"    Return time-latency samples for the <event> class.",
		"LATEST",
		"    Return the latest latency samples for all events.",
		"RESET [<event> ...]",
		"    Reset latency data of one or more <event> classes.",
		"    (default: reset all data for all event classes)",
		"HISTOGRAM [COMMAND ...]",
		"    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
		"    If no commands are specified then all histograms are replied.",
		"HELP",
		"    Prints this help.")
}

// LATENCY HISTOGRAM [command ...]: for each command (every command called
// at least once when none is named; a named container adds its
// subcommands; unknown names are skipped, as in Redis), its name, then
// [calls, n, histogram_usec, [bound, cumulative count, ...]] with one
// pair per LatencyBuckets bound whose cumulative count grew, in
// microseconds. Latencies above the last bound count at it, as Redis's
// histogram clamps at one second. Both levels are maps in Redis
// (RESP2: flat arrays of pairs).
func cmdLatencyHistogram(x *ctx) {
	var specs []*Spec
	if len(x.args) == 2 {
		specs = x.s.specs
	} else {
		for _, a := range x.args[2:] {
			sp := x.s.findSpec(a)
			if sp == nil {
				continue
			}
			specs = append(specs, sp)
			specs = append(specs, sp.Subs...)
		}
	}
	type hist struct {
		name  string
		calls int64
		pairs []int64
	}
	var out []hist
	for _, sp := range specs {
		h := hist{name: sp.Name}
		for i := range sp.stats.buckets {
			n := sp.stats.buckets[i].Load()
			if n == 0 {
				continue
			}
			h.calls += n
			bound := latencyBoundsNS[min(i, len(latencyBoundsNS)-1)] / 1000
			if k := len(h.pairs); k > 0 && h.pairs[k-2] == bound {
				h.pairs[k-1] = h.calls
				continue
			}
			h.pairs = append(h.pairs, bound, h.calls)
		}
		if h.calls > 0 {
			out = append(out, h)
		}
	}
	x.mapLen(len(out))
	for _, h := range out {
		x.bulkStr(h.name)
		x.mapLen(2)
		x.bulkStr("calls")
		x.int(h.calls)
		x.bulkStr("histogram_usec")
		x.mapLen(len(h.pairs) / 2)
		for _, v := range h.pairs {
			x.int(v)
		}
	}
}
