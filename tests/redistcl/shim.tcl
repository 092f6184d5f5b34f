# Loaded into the Redis test client before each unit (tests/redistcl sends
# it with the unit as one "run_code" request). It changes the vendored
# framework, which stays unmodified on disk, in one place only:
#
# run_external_server_test is Redis 7.0.15's tests/support/server.tcl
# proc of that name, except that "r function flush" (cellserver has no
# FUNCTION: no scripting) is allowed to fail. In Redis it runs unguarded at
# the start of every start_server block against an external server, so
# without this no block would run at all.
proc run_external_server_test {code overrides} {
    set srv {}
    dict set srv "host" $::host
    dict set srv "port" $::port
    set client [redis $::host $::port 0 $::tls]
    dict set srv "client" $client
    if {!$::singledb} {
        $client select 9
    }

    set config {}
    dict set config "port" $::port
    dict set srv "config" $config

    # append the server to the stack
    lappend ::servers $srv

    if {[llength $::servers] > 1} {
        if {$::verbose} {
            puts "Notice: nested start_server statements in external server mode, test must be aware of that!"
        }
    }

    r flushall
    catch {r function flush}

    # store overrides
    set saved_config {}
    foreach {param val} $overrides {
        dict set saved_config $param [lindex [r config get $param] 1]
        r config set $param $val

        # If we enable appendonly, wait for for rewrite to complete. This is
        # required for tests that begin with a bg* command which will fail if
        # the rewriteaof operation is not completed at this point.
        if {$param == "appendonly" && $val == "yes"} {
            waitForBgrewriteaof r
        }
    }

    if {[catch {set retval [uplevel 2 $code]} error]} {
        if {$::durable} {
            set msg [string range $error 10 end]
            lappend details $msg
            lappend details $::errorInfo
            lappend ::tests_failed $details

            incr ::num_failed
            send_data_packet $::test_server_fd err [join $details "\n"]
        } else {
            # Re-raise, let handler up the stack take care of this.
            error $error $::errorInfo
        }
    }

    # restore overrides
    dict for {param val} $saved_config {
        r config set $param $val
    }

    set srv [lpop ::servers]
    
    if {[dict exists $srv "client"]} {
        [dict get $srv "client"] close
    }
}

# After a test fails, leave no transaction or WATCH open on the shared
# client: a test that fails between MULTI and EXEC (on a command cellserver
# lacks) would otherwise have every later test's commands queued ("QUEUED"
# replies), one failing after WATCH would abort a later test's EXEC, and
# the list would hold those instead of what the later tests find. Redis's
# framework needs nothing of the kind, its tests passing. The test itself
# runs exactly as the framework's "test" runs it.
rename test redistcl_framework_test
proc test {name code {okpattern undefined} {tags {}}} {
    set failed $::num_failed
    uplevel 1 [list redistcl_framework_test $name $code $okpattern $tags]
    if {$::num_failed > $failed && [llength $::servers] > 0} {
        # Only on a client that reads its replies itself (not deferred, not
        # raw), so that the DISCARD's reply cannot reach a later test.
        set client [srv 0 client]
        if {[regexp {redisHandle(\d+)$} $client -> id] &&
            !$::redis::deferred($id) && !$::redis::readraw($id)} {
            catch {$client discard}
            catch {$client unwatch}
        }
    }
}

# For the units the Go side names (externalSkipRun), a block or test tagged
# external:skip runs anyway: tags_acceptable is Redis's, asked about the
# tags without that one.
rename tags_acceptable redistcl_tags_acceptable
proc tags_acceptable {tags err_return} {
    upvar $err_return err
    if {[info exists ::redistcl_run_external_skip]} {
        set i [lsearch $tags "external:skip"]
        if {$i >= 0} {
            set tags [lreplace $tags $i $i]
        }
    }
    return [redistcl_tags_acceptable $tags err]
}
