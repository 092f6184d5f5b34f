package commands

import (
	"strconv"
	"strings"

	"github.com/cellserver/cellserver/replication"
)

const replicationCapability = replication.Capability

// wireErr is a wire error text on its way to a client: code word first
// ("ERR ...", "WRONGTYPE ...", "Cell error: ..."), sent as it is after
// sanitizeError, by errorReply only. Functions that parse or decide return
// one beside their result; the zero value, noErr, means no error, and no
// text of this file is empty. A wireErr is a string so that returning one
// costs nothing on the paths that succeed.
type wireErr string

// noErr is the wireErr of success.
const noErr wireErr = ""

// Wire error texts. Every error cellserver sends is built here, so the exact
// bytes clients see can be reviewed in one place. Each text carries its own
// code word ("ERR", "WRONGTYPE", "Cell", ...) and is sent as it is after
// sanitizeError.
const (
	// Authentication and transactions.
	msgNoAuth        = "NOAUTH Authentication required."
	msgWrongPass     = "WRONGPASS invalid username-password pair or user is disabled."
	msgNotInMulti    = "ERR Command not allowed inside a transaction"
	msgPingArgs      = "ERR wrong number of arguments for 'ping' command"
	msgWrongType     = "WRONGTYPE Operation against a key holding the wrong kind of value"
	msgSyntax        = "ERR syntax error"
	msgNotInt        = "ERR value is not an integer or out of range"
	msgInvalidExpire = "ERR invalid expire time in '%s' command"
	msgDBIndex       = "ERR DB index is out of range"
	msgNoMulti       = "ERR MULTI calls can not be nested"
	msgExecNoMulti   = "ERR EXEC without MULTI"
	msgDiscardNoMult = "ERR DISCARD without MULTI"
	msgExecAbort     = "EXECABORT Transaction discarded because of previous errors."
	msgExecAbortWhy  = "EXECABORT Transaction discarded because of: %s"
	msgNoProto       = "NOPROTO unsupported protocol version"
	msgHelloNoAuth   = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
	msgIntRange      = "ERR value is out of range, value must between -2147483648 and 2147483647"
	msgProtoNotInt   = "ERR Protocol version is not an integer or out of range"
	msgInvalidCursor = "ERR invalid cursor"
	msgNoSuchCommand = "ERR Invalid command specified"
	msgInvalidArgs   = "ERR Invalid arguments specified for command"
	msgGetKeysArity  = "ERR Invalid number of arguments specified for command"
	msgNoKeyArgs     = "ERR The command has no key arguments"
	msgClientName    = "ERR Client names cannot contain spaces, newlines or special characters."
	msgClientType    = "ERR Unknown client type '%s'"
	msgClientID      = "ERR Invalid client ID"
	msgClientInfoArg = "ERR %s cannot contain spaces, newlines or special characters."
	// CLIENT KILL, as Redis 7.0.15 sends them; msgClientKillMaxAge is
	// cellserver's (MAXAGE came with Redis 7.4).
	msgClientKillID     = "ERR client-id should be greater than 0"
	msgNoSuchClient     = "ERR No such client"
	msgNoSuchUser       = "ERR No such user '%s'"
	msgClientKillMaxAge = "ERR maxage is not an integer or out of range"
	// A RESP2 client in subscribed mode; %s is the command's full name
	// (client|list).
	msgPubsubContext = "ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
	// SSUBSCRIBE inside MULTI (Redis 7.0.15: a client that expects one
	// reply per command).
	msgSSubscribeDenied = "ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client"
	// CLIENT TRACKING and CLIENT CACHING, as Redis 7.0.15 sends them.
	msgTrackingRedirectTwice = "ERR A client can only redirect to a single other client"
	msgTrackingRedirectNone  = "ERR The client ID you want redirect to does not exist"
	msgTrackingPrefixBcast   = "ERR PREFIX option requires BCAST mode to be enabled"
	msgTrackingSwitchBcast   = "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode."
	msgTrackingBcastOpt      = "ERR OPTIN and OPTOUT are not compatible with BCAST"
	msgTrackingOptinOptout   = "ERR You can't specify both OPTIN mode and OPTOUT mode"
	msgTrackingSwitchOpt     = "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode."
	msgTrackingPrefixOld     = "ERR Prefix '%s' overlaps with an existing prefix '%s'. Prefixes for a single client must not overlap."
	msgTrackingPrefixNew     = "ERR Prefix '%s' overlaps with another provided prefix '%s'. Prefixes for a single client must not overlap."
	msgCachingNotTracking    = "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"
	msgCachingYes            = "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."
	msgCachingNo             = "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
	msgConfigNoFile          = "ERR The server is running without a config file"
	msgConfigRewrite         = "ERR Rewriting config file: %s"
	msgNoAuthNeeded          = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
	msgDumpUnavailable       = "ERR DUMP is unavailable: this server has no value encoder"
	msgLatencyGraph          = "ERR No samples available for event '%s'"
	// SAVE, BGSAVE, SHUTDOWN (cmd_shutdown.go), as Redis 7.0.15 sends
	// them, and cellserver's own for a server without a data directory
	// (Redis would write an RDB file; cellserver has nowhere to save).
	msgBgsaveInProgress = "ERR Background save already in progress"
	msgNoShutdown       = "ERR No shutdown in progress."
	msgShutdownFailed   = "ERR Errors trying to SHUTDOWN. Check logs."
	msgNoDataDir        = "ERR persistence is off: start cellserver with --data-dir to save"
	// MONITOR inside EXEC (Redis: a DENY BLOCKING client).
	msgMonitorDenyBlocking = "ERR MONITOR isn't allowed for DENY BLOCKING client"
	msgMonitorKeyspace     = "ERR Replica can't interact with the keyspace"
	// WAITAOF, as Redis 7.2 sends them (no 7.0 reference).
	msgWaitAOFLocalRange = "ERR value is out of range, value must between 0 and 1"
	msgNotPositive       = "ERR value is out of range, must be positive"
	msgWaitAOFReplica    = "ERR WAITAOF cannot be used with replica instances. Please also note that writes to replicas are just local and are not propagated."
	msgWaitAOFNoAOF      = "ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled."
	// Replication, as Redis 7.0.15 sends them, and cellserver's own for
	// the replication handshake.
	msgReadOnly             = "READONLY You can't write against a read only replica."
	msgNoReplicas           = "NOREPLICAS Not enough good replicas to write."
	msgMasterDown           = "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
	msgInvalidMasterPort    = "ERR Invalid master port"
	msgWaitReplica          = "ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated."
	msgTimeoutNotInt        = "ERR timeout is not an integer or out of range"
	msgTimeoutNegative      = "ERR timeout is negative"
	msgNoMasterLink         = "NOMASTERLINK Can't SYNC while not connected with my master"
	msgNotCellserverReplica = "ERR cellserver replicates only to cellserver replicas (REPLCONF capa " + replicationCapability + " first; a replica must run a cellserver as new as its primary)"
	// msgReplicationLoop answers REPLCONF node-id and PSYNC from a node
	// this one replicates from (directly or through other replicas), or
	// from itself.
	msgReplicationLoop = "ERR replication loop: the connecting node is this node or one it replicates from"
	// msgMaxClients is Redis's refusal past maxclients, which replica
	// links count towards.
	msgMaxClients = "ERR max number of clients reached"
	// MODULE LOAD, LOADEX and UNLOAD: %s is the subcommand, upper-cased.
	msgModuleBuiltIn = "ERR MODULE %s is not supported: cellserver loads no modules; redis-cell's commands are built in (MODULE LIST)"

	// CL.THROTTLE, exactly as redis-cell 0.5.0 sends them (no ERR code).
	cellPrefix        = "Cell error: Store error: "
	msgCellUsage      = cellPrefix + "Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"
	msgCellParseInt   = cellPrefix + "Couldn't parse as integer: "
	msgCellZeroRate   = cellPrefix + "Zero rates are not supported"
	msgCellExpire     = cellPrefix + "Error while setting key expire"
	msgCellBadUTF8    = cellPrefix + "Argument is not valid UTF-8"
	msgCellBadStored  = cellPrefix + "Stored value is not an unsigned integer"
	msgUnknownCommand = "ERR unknown command '%s', with args beginning with: %s"
	msgUnknownSubcmd  = "ERR unknown subcommand '%s'. Try %s HELP."
	msgSubcmdSyntax   = "ERR unknown subcommand or wrong number of arguments for '%s'. Try %s HELP."
	msgWrongArity     = "ERR wrong number of arguments for '%s' command"
)

// errWrongArity is Redis 7's arity error; name is the command as the client
// sent it, subcommands as "container|sub".
func errWrongArity(name string) wireErr {
	return wireErr(strings.Replace(msgWrongArity, "%s", name, 1))
}

// errUnknownCommand is Redis 7's text: the name is cut to 128 bytes and the
// arguments are quoted, each cut to 128 bytes, the whole list to 128 bytes.
func errUnknownCommand(args [][]byte) wireErr {
	name := cstr(args[0])
	if len(name) > 128 {
		name = name[:128]
	}
	var b strings.Builder
	for _, a := range args[1:] {
		if b.Len() >= 128 {
			break
		}
		s := cstr(a)
		if len(s) > 128-b.Len() {
			s = s[:128-b.Len()]
		}
		b.WriteByte('\'')
		b.WriteString(s)
		b.WriteString("' ")
	}
	msg := strings.Replace(msgUnknownCommand, "%s", name, 1)
	return wireErr(strings.Replace(msg, "%s", b.String(), 1))
}

// errUnknownSubcommand is Redis 7's text: the subcommand is cut to 128
// bytes, the container is upper-cased.
func errUnknownSubcommand(sub, container string) wireErr {
	if len(sub) > 128 {
		sub = sub[:128]
	}
	msg := strings.Replace(msgUnknownSubcmd, "%s", sub, 1)
	return wireErr(strings.Replace(msg, "%s", strings.ToUpper(container), 1))
}

// errSubcommandSyntax is Redis's addReplySubcommandSyntaxError: for a
// subcommand whose arguments its handler rejects.
func errSubcommandSyntax(sub, container string) wireErr {
	if len(sub) > 128 {
		sub = sub[:128]
	}
	msg := strings.Replace(msgSubcmdSyntax, "%s", sub, 1)
	return wireErr(strings.Replace(msg, "%s", strings.ToUpper(container), 1))
}

// errUnrecognizedReplconf is REPLCONF's reply to an option it does not know.
func errUnrecognizedReplconf(opt string) wireErr {
	return wireErr("ERR Unrecognized REPLCONF option: " + opt)
}

// errExecAbort is what a rejected EXEC answers (Redis's execCommandAbort):
// the reason without its "ERR " code; other codes (NOAUTH) are kept.
// errConfigSet is CONFIG SET's refusal of one parameter (Redis 7's
// text), why being e.g. "can't set immutable config".
func errConfigSet(param, why string) wireErr {
	return wireErr("ERR CONFIG SET failed (possibly related to argument '" + param + "') - " + why)
}

// errConfigSetUnknown is CONFIG SET's refusal of a parameter it does not
// know (Redis 7's text).
func errConfigSetUnknown(param string) wireErr {
	return wireErr("ERR Unknown option or number of arguments for CONFIG SET - '" + param + "'")
}

// errMigration is a slot migration target's refusal of its source's
// command (cluster/migration.go): the source shows it as the
// migration's error, FATAL ones end the migration.
func errMigration(err error) wireErr {
	s := err.Error()
	if strings.HasPrefix(s, "UNKNOWN_MIGRATION") || strings.HasPrefix(s, "FATAL ") {
		return wireErr(s)
	}
	return wireErr("ERR " + s)
}

func errExecAbort(reason wireErr) wireErr {
	return wireErr(strings.Replace(msgExecAbortWhy, "%s", strings.TrimPrefix(string(reason), "ERR "), 1))
}

func errInvalidExpire(cmd string) wireErr {
	return wireErr(strings.Replace(msgInvalidExpire, "%s", cmd, 1))
}

// sanitizeError applies what Redis does to every error text before it is
// sent: cut at the first NUL, trim CR/LF at both ends, turn inner CR/LF
// into spaces.
func sanitizeError(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	s = strings.Trim(s, "\r\n")
	if strings.ContainsAny(s, "\r\n") {
		b := []byte(s)
		for i, c := range b {
			if c == '\r' || c == '\n' {
				b[i] = ' '
			}
		}
		s = string(b)
	}
	return s
}

// cstr returns b as C's "%s" would print it: up to the first NUL.
func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// errorCode returns the code INFO errorstats counts an error text under:
// its first word ("ERR", "WRONGTYPE", "Cell").
func errorCode(msg string) string {
	if i := strings.IndexByte(msg, ' '); i > 0 {
		return msg[:i]
	}
	return msg
}

// The limiter family's texts (CL.PEEK answers with CL.THROTTLE's texts).
const (
	msgLimit        = "ERR limit must be a positive integer"
	msgSlidingLimit = "ERR limit must be between 1 and 4294967295 for CL.SLIDING"
	msgLeasesLimit  = "ERR limit must be between 1 and 10000 for CL.ACQUIRE"
	msgPeriod       = "ERR period must be a positive number of seconds or a duration such as 250ms, 1.5s, 10m, 1h, at most 10 years"
	msgLease        = "ERR lease must be a positive number of seconds or a duration such as 250ms, 1.5s, 10m, 1h, at most 10 years"
	msgQuantity     = "ERR quantity must be an integer"
	msgQuantityNeg  = "ERR quantity must not be negative for CL.SLIDINGLOG"
	msgAllDupKey    = "ERR CL.ALL checks must use distinct keys"
	msgAllTooMany   = "ERR CL.ALL takes at most 1024 checks"
	// CL.APPLY and CL.POLICY.
	msgNoPolicies   = "ERR no policies loaded (start cellserver with --policies FILE)"
	msgNoPolicyFile = "ERR no policy file to reload (start cellserver with --policies FILE)"
	msgApplyToken   = "ERR a concurrency policy takes a token: CL.APPLY key policy token"
)

// errUnknownPolicy is CL.APPLY's and CL.POLICY GET's error for a name
// the policies in force do not have.
func errUnknownPolicy(name []byte) wireErr {
	return wireErr("ERR unknown policy '" + cstr(name) + "'")
}

// errPolicyReload is CL.POLICY RELOAD's error for a file that could not
// be read or is invalid (ReloadPolicies' error; a *policy.Error lists
// every problem of the file on one line).
func errPolicyReload(err error) wireErr {
	return wireErr("ERR " + strings.TrimPrefix(err.Error(), "commands: "))
}

// A command past the MULTI queue's limits (Config.MultiMaxCommands,
// MultiMaxBytes) gets one of these, and EXEC then aborts.
const (
	msgMultiQueueCmds  = "ERR MULTI queue is full: at most multi-max-commands commands can be queued"
	msgMultiQueueBytes = "ERR MULTI queue is full: at most multi-max-bytes bytes can be queued"
)

// WATCH's errors: inside MULTI (Redis's text), and past the limits of what
// one client may watch (the MULTI queue's figures; nothing of the refused
// WATCH is watched).
const (
	msgWatchInMulti = "ERR WATCH inside MULTI is not allowed"
	msgWatchKeys    = "ERR WATCH list is full: at most multi-max-commands keys can be watched"
	msgWatchBytes   = "ERR WATCH list is full: at most multi-max-bytes bytes can be watched"
)

func errUnknownCheck(name string) wireErr {
	return wireErr("ERR CL.ALL: unknown check '" + cstr([]byte(name)) + "' (expected CL.THROTTLE, CL.FIXED, CL.SLIDING, CL.SLIDINGLOG, CL.ACQUIRE or CL.RESERVE)")
}

func errCheckArity(name string) wireErr {
	usage := map[string]string{
		"cl.throttle":   "CL.THROTTLE key max_burst count period quantity [MS]",
		"cl.fixed":      "CL.FIXED key limit period quantity [MS]",
		"cl.sliding":    "CL.SLIDING key limit period quantity [MS]",
		"cl.slidinglog": "CL.SLIDINGLOG key limit period quantity [MS]",
		"cl.acquire":    "CL.ACQUIRE key limit lease token [WAIT timeout [QUEUE n]] [MS]",
		"cl.reserve":    "CL.RESERVE key THROTTLE|FIXED|SLIDING|SLIDINGLOG args... quantity ttl [MS]",
	}[name]
	return wireErr("ERR CL.ALL: incomplete check, expected " + usage)
}

// msgDenied is sent, then the connection closed, to a client from another
// host while protected mode is on (Redis's DENIED reply, in cellserver's
// words).
const msgDenied = "DENIED cellserver is running in protected mode because protected mode is enabled and no password is set. " +
	"In this mode connections are only accepted from the loopback interface. To accept clients from other hosts, " +
	"either set a password with --requirepass, or restart with --protected-mode no after making sure the port is not reachable from untrusted networks."

// Cluster mode, as Redis 7.0.15 sends them (MOVED: errMoved), and
// cellserver's for CELLCLUSTER.
const (
	msgClusterDisabled    = "ERR This instance has cluster support disabled"
	msgCrossSlot          = "CROSSSLOT Keys in request don't hash to the same slot"
	msgClusterDownUnbound = "CLUSTERDOWN Hash slot not served"
	// msgTryAgainMigrating: a write to a slot this node is handing over
	// to a migration's target, for the moment the handover takes; Redis
	// Cluster clients retry on TRYAGAIN.
	msgTryAgainMigrating  = "TRYAGAIN Slot being handed over to another node by a migration, try again"
	msgSelectCluster      = "ERR SELECT is not allowed in cluster mode"
	msgInvalidSlot        = "ERR Invalid slot"
	msgInvalidSlotOrCount = "ERR Invalid slot or number of keys"
	msgInvalidClusterCfg  = "ERR Invalid cluster configuration: "
	msgInvalidNodeID      = "ERR Invalid node id: "
	msgClusterConfigFile  = "ERR Saving the cluster configuration: "
)

// errMoved is Redis's redirection: -MOVED <slot> <ip>:<port>.
func errMoved(slot int, addr string) wireErr {
	return wireErr("MOVED " + strconv.Itoa(slot) + " " + addr)
}

func errInvalidClusterConfig(reason string) wireErr { return wireErr(msgInvalidClusterCfg + reason) }

func errInvalidNodeID(reason string) wireErr { return wireErr(msgInvalidNodeID + reason) }

func errClusterConfigFile(err error) wireErr { return wireErr(msgClusterConfigFile + err.Error()) }

// msgOOM is Redis's refusal under maxmemory with the noeviction policy.
// Consumer groups (XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM,
// XINFO), Redis 7.0.15's texts (t_stream.c); the NOGROUP errors that name
// a key and a group are built by errNoGroup* in cmd_streamgroup.go.
const (
	msgEntriesReadNeg    = "ERR value for ENTRIESREAD must be positive or -1"
	msgXGroupNoKey       = "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."
	msgBusyGroup         = "BUSYGROUP Consumer Group name already exists"
	msgXClaimMinIdle     = "ERR Invalid min-idle-time argument for XCLAIM"
	msgXClaimIdle        = "ERR Invalid IDLE option argument for XCLAIM"
	msgXClaimTime        = "ERR Invalid TIME option argument for XCLAIM"
	msgXClaimRetry       = "ERR Invalid RETRYCOUNT option argument for XCLAIM"
	msgXAutoClaimMinIdle = "ERR Invalid min-idle-time argument for XAUTOCLAIM"
	msgXAutoClaimCount   = "ERR COUNT must be > 0"
	msgXReadGroupNoGroup = "ERR Missing GROUP option for XREADGROUP"
	msgUnblockedNoKey    = "UNBLOCKED the stream key no longer exists"
	msgUnblockedNoGroup  = "NOGROUP the consumer group this client was blocked on no longer exists"
	msgXReadGroupDollar  = "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set."
)

const msgOOM = "OOM command not allowed when used memory > 'maxmemory'."

// msgMisconf refuses write commands while the data directory cannot be
// written (Redis: "MISCONF Errors writing to the AOF file: <reason>").
const msgMisconf = "MISCONF Errors writing to the data directory (--data-dir): %s. Write commands are refused until a write succeeds; reads still work."

// errMisconf is msgMisconf with the store's error as the reason.
func errMisconf(err error) wireErr {
	return wireErr(strings.Replace(msgMisconf, "%s", err.Error(), 1))
}

func errTrackingPrefixExisting(p, q string) wireErr {
	return wireErr(sprintf2(msgTrackingPrefixOld, p, q))
}

func errTrackingPrefixProvided(p, q string) wireErr {
	return wireErr(sprintf2(msgTrackingPrefixNew, p, q))
}

// cellserver's caps on BCAST prefixes (Redis has none); the numbers are
// TrackingMaxPrefixesPerClient, TrackingMaxPrefixes and
// TrackingMaxPrefixLen (TestTrackingPrefixCaps checks them).
const (
	msgTrackingPrefixesClient = "ERR too many tracking prefixes: at most 10000 per client"
	msgTrackingPrefixesServer = "ERR too many tracking prefixes: at most 100000 on the server"
	msgTrackingPrefixLen      = "ERR tracking prefix too long: at most 1024 bytes"
)

// sprintf2 fills the two %s of msg.
func sprintf2(msg, a, b string) string {
	msg = strings.Replace(msg, "%s", a, 1)
	return strings.Replace(msg, "%s", b, 1)
}

// GCRA, Redis's draft command, as src/gcra.c (redis/redis commit
// 10040538b194f52abcb8032dfb60cf10ea7e3bb0) sends them; the overflow texts
// come from gcra.ErrDraft*.
const (
	msgGCRAPositive     = "ERR value is out of range, must be positive"
	msgGCRARange1       = "ERR value is out of range, value must between 1 and 9223372036854775807"
	msgGCRANotFloat     = "ERR value is not a valid float"
	msgGCRAMissingCount = "ERR Missing TOKENS value"
	msgGCRAInvalidKey   = "ERR Invalid GCRA key"
)

// errGCRA is the wire text of a gcra.DecideDraft error: its text without
// the Go package prefix.
func errGCRA(err error) wireErr { return wireErr("ERR " + strings.TrimPrefix(err.Error(), "gcra: ")) }

// CL.RESERVE, CL.SETTLE and CL.CANCEL.
const (
	msgReserveKind         = "ERR reservation kind must be THROTTLE, FIXED, SLIDING or SLIDINGLOG: CL.RESERVE key THROTTLE|FIXED|SLIDING|SLIDINGLOG args... quantity ttl [MS]"
	msgReserveKindAll      = "ERR CL.ALL: unknown reservation kind (expected CL.RESERVE key THROTTLE|FIXED|SLIDING|SLIDINGLOG args... quantity ttl [MS])"
	msgReserveQuantity     = "ERR quantity must not be negative for CL.RESERVE"
	msgReserveTTL          = "ERR ttl must be a positive number of seconds or a duration such as 250ms, 1.5s, 10m, 1h, at most 10 years"
	msgTooManyReservations = "ERR too many open reservations on the key (at most 10000)"
	msgReservationID       = "ERR reservation id must be a positive integer"
	msgSettleActual        = "ERR actual must be a non-negative integer"
	msgNoReservation       = "ERR no such reservation (unknown id, or its ttl ended)"
)

// errSettled is CL.SETTLE's and CL.CANCEL's error for a reservation
// already settled with another actual (a cancel settles with 0).
func errSettled(actual int64) wireErr {
	return wireErr("ERR reservation already settled with actual " + strconv.FormatInt(actual, 10))
}

// CL.PACE's texts (a bad period gets msgPeriod).
const (
	msgPaceMaxBurst = "ERR max_burst must be a non-negative integer"
	msgPaceCount    = "ERR count must be a positive integer"
	msgPaceQuantity = "ERR quantity must be a positive integer for CL.PACE"
	msgPaceMaxWait  = "ERR MAXWAIT must be 0, a number of seconds or a duration such as 250ms, 1.5s, 10m, at most 10 years"
	msgPaceRate     = "ERR count per period must leave an emission interval (period/count) of at least 1ns"
	msgPaceBurst    = "ERR max_burst+1 emission intervals (period/count) must span at most 2^62 ns (about 146 years)"
)

// CL.ACQUIRE ... WAIT timeout [QUEUE n].
const (
	msgAcquireWait        = "ERR WAIT timeout must be a positive number of seconds or a duration such as 250ms"
	msgAcquireQueue       = "ERR QUEUE must be between 1 and 10000"
	msgAcquireQueueNoWait = "ERR QUEUE requires WAIT"
	// A waiter's node became a read-only replica (Redis's text).
	msgUnblockedReplica = "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"
)

// EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT options, as Redis 7.0.15 sends
// them.
const (
	msgExpireNXAndXXGTLT = "ERR NX and XX, GT or LT options at the same time are not compatible"
	msgExpireGTAndLT     = "ERR GT and LT options at the same time are not compatible"
)

// RENAME, COPY and OBJECT, as Redis 7.0.15 sends them.
const (
	msgNoSuchKey   = "ERR no such key"
	msgSameObject  = "ERR source and destination objects are the same"
	msgCopyCluster = "ERR Copying to another database is not allowed in cluster mode"
	msgNoLFU       = "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."
	msgLFUNoIdle   = "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."
)

// errExpireOption is the EXPIRE family's error for an option it does not know.
func errExpireOption(opt []byte) wireErr { return wireErr("ERR Unsupported option " + string(opt)) }

// errHelloOption is HELLO's error for an option it does not know.
func errHelloOption(opt []byte) wireErr {
	return wireErr("ERR Syntax error in HELLO option '" + string(opt) + "'")
}

// errClientInfoOption is CLIENT SETINFO's error for an attribute it does
// not know.
func errClientInfoOption(attr []byte) wireErr {
	return wireErr("ERR Unrecognized option '" + string(attr) + "'")
}

// msgSlowlogCount is SLOWLOG GET's error for a bad count.
const msgSlowlogCount = "ERR count should be greater than or equal to -1"

// errClientType is CLIENT LIST's and CLIENT KILL's error for a TYPE they
// do not know.
func errClientType(typ []byte) wireErr {
	return wireErr(strings.Replace(msgClientType, "%s", cstr(typ), 1))
}

// errNoSuchUser is CLIENT KILL USER's error for a user that does not exist.
func errNoSuchUser(user []byte) wireErr {
	return wireErr(strings.Replace(msgNoSuchUser, "%s", cstr(user), 1))
}

// errClientInfoArg is CLIENT SETINFO's error for a value with spaces,
// newlines or special characters; attr is lower-cased.
func errClientInfoArg(attr []byte) wireErr {
	return wireErr(strings.Replace(msgClientInfoArg, "%s", strings.ToLower(string(attr)), 1))
}

// errLatencyGraph is LATENCY GRAPH's error for an event with no samples.
func errLatencyGraph(event []byte) wireErr {
	return wireErr(strings.Replace(msgLatencyGraph, "%s", cstr(event), 1))
}

// errCellParseInt is redis-cell's error for an argument that is not an
// integer.
func errCellParseInt(arg []byte) wireErr { return wireErr(msgCellParseInt + string(arg)) }

// errModuleBuiltIn is MODULE's error for sub (upper-cased: LOAD, LOADEX,
// UNLOAD).
func errModuleBuiltIn(sub string) wireErr {
	return wireErr(strings.Replace(msgModuleBuiltIn, "%s", sub, 1))
}

// errConfigRewrite is CONFIG REWRITE's error for a file it could not write.
func errConfigRewrite(err error) wireErr {
	return wireErr(strings.Replace(msgConfigRewrite, "%s", err.Error(), 1))
}

// errPubsubContext refuses the command named full (client|list) to a RESP2
// client in subscribed mode.
func errPubsubContext(full string) wireErr {
	return wireErr(strings.Replace(msgPubsubContext, "%s", full, 1))
}

// ACL (acl.go, cmd_acl.go): Redis 7.0's texts (server.c processCommand,
// acl.c aclCommand).
const (
	msgNoPermKey       = "NOPERM this user has no permissions to access one of the keys used as arguments"
	msgNoPermChannel   = "NOPERM this user has no permissions to access one of the channels used as arguments"
	msgACLUserSpaces   = "ERR Usernames can't contain spaces or null characters"
	msgACLDelDefault   = "ERR The 'default' user cannot be removed"
	msgACLGenpassBits  = "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096"
	msgACLNoFile       = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration."
	msgACLSaveFailed   = "ERR There was an error trying to save the ACLs. Please check the server logs for more information"
	msgACLNameTooLong  = "ERR Username too long (the limit is 1024 bytes)"
	msgACLTooManyRules = "ERR Too many ACL rules (the limit is 1024 per call)"
)

// errNoPermCmd is NOPERM for a command the user may not run (full name:
// "config|get").
func errNoPermCmd(full string) wireErr {
	return wireErr("NOPERM this user has no permissions to run the '" + full + "' command")
}

// errACLUnknownCategory is ACL CAT's error for a category it does not know.
func errACLUnknownCategory(cat []byte) wireErr {
	c := cstr(cat)
	if len(c) > 128 {
		c = c[:128]
	}
	return wireErr("ERR Unknown category '" + c + "'")
}

// errACLUserNotFound is ACL DRYRUN's error for a user that does not exist.
func errACLUserNotFound(user []byte) wireErr {
	return wireErr("ERR User '" + cstr(user) + "' not found")
}

// errACLCommandNotFound is ACL DRYRUN's error for a command it does not know.
func errACLCommandNotFound(name []byte) wireErr {
	return wireErr("ERR Command '" + cstr(name) + "' not found")
}

// errNoPermExec is EXEC's error for a queued command the user's rules no
// longer allow.
func errNoPermExec(reason string) wireErr {
	return wireErr("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: " + reason)
}

// The string and counter commands, as Redis 7.0.15's t_string.c sends
// them (msgIncrexBounds is cellserver's: Redis 8.8's INCREX text is not
// recorded here).
const (
	msgNotFloat      = "ERR value is not a valid float"
	msgIncrOverflow  = "ERR increment or decrement would overflow"
	msgDecrOverflow  = "ERR decrement would overflow"
	msgFloatNaNInf   = "ERR increment would produce NaN or Infinity"
	msgStringTooLong = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
	msgIncrexBounds  = "ERR LBOUND must be less than or equal to UBOUND"
)

// Streams (cmd_stream.go), as Redis 7.0.15 sends them; msgTooManyBlocked
// is cellserver's (maxKeyWaiters, stream_block.go).
const (
	msgStreamID               = "ERR Invalid stream ID specified as stream command argument"
	msgTrimBoth               = "ERR syntax error, MAXLEN and MINID options at the same time are not compatible"
	msgMaxLenNegative         = "ERR The MAXLEN argument must be >= 0."
	msgLimitNegative          = "ERR The LIMIT argument must be >= 0."
	msgLimitNoStrategy        = "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"
	msgXtrimNoStrategy        = "ERR syntax error, XTRIM must be called with a trimming strategy"
	msgLimitNoApprox          = "ERR syntax error, LIMIT cannot be used without the special ~ option"
	msgXaddIDZero             = "ERR The ID specified in XADD must be greater than 0-0"
	msgStreamExhausted        = "ERR The stream has exhausted the last possible ID, unable to add more items"
	msgXaddIDSmall            = "ERR The ID specified in XADD is equal or smaller than the target stream top item"
	msgStreamElementsTooLarge = "ERR Elements are too large to be stored"
	// msgStreamTooLarge is cellserver's own: a stream is capped at
	// stream.MaxSize (Redis has no such cap).
	msgStreamTooLarge        = "ERR stream exceeds the maximum size of a stream (512 MiB): trim it (XTRIM) or delete it"
	msgStreamStartInterval   = "ERR invalid start ID for the interval"
	msgStreamEndInterval     = "ERR invalid end ID for the interval"
	msgEntriesAddedNegative  = "ERR entries_added must be positive"
	msgXsetidBelowMaxDeleted = "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"
	msgXsetidBelowTop        = "ERR The ID specified in XSETID is smaller than the target stream top item"
	msgXsetidEntriesAdded    = "ERR The entries_added specified in XSETID is smaller than the target stream length"
	msgXreadUnbalanced       = "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified."
	msgXreadGroupOption      = "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead."
	msgXreadNoackOption      = "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead."
	msgXreadGtID             = "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option."
	msgTooManyBlocked        = "ERR too many clients blocked on keys (10000)"
)
