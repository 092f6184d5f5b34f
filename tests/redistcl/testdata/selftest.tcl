# A unit of this repository (not Redis's) that checks the runner itself:
# each way a test can end, reported as TestRunnerOutcomes expects.
start_server {tags {"selftest"}} {
    test {passes} {
        r set k v
        r get k
    } {v}

    test {fails} {
        assert_equal 1 2
    }

    test {fails on an unknown command} {
        r nosuchcommand
    }

    test {hangs} {
        after 600000
    }

    test {runs after the restart} {
        r ping
    } {PONG}

    test {skipped by a tag} {
    } {} {external:skip}
}

start_server {tags {"selftest external:skip"}} {
    test {never runs} {
    }
}

start_server {tags {"selftest"}} {
    r nosuchcommand2
    test {not reached} {
    }
}

error "boom outside any test"
