package compat

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestTranscriptTable walks the parsed transcripts: every file has blocks,
// every block has commands (the parser rejects one without), titles are
// unique, section 10 rows 1-43 each have exactly one block, and the log says
// how much the replays verify.
func TestTranscriptTable(t *testing.T) {
	files := loadTranscripts(t)
	rowTitle := regexp.MustCompile(`^row ([0-9]+):`)
	rows := make(map[int]int)
	titles := make(map[string]string)
	var blocks, commands, instants, cliSkipped int
	for _, tr := range files {
		if len(tr.blocks) == 0 {
			t.Errorf("%s: no blocks", tr.file)
			continue
		}
		fileCmds := 0
		for _, b := range tr.blocks {
			n := b.numCommands()
			if n == 0 {
				t.Errorf("%s: block %q has no commands", b.file, b.title)
			}
			if prev, dup := titles[b.title]; dup {
				t.Errorf("%s:%d: title %q already used at %s", b.file, b.line, b.title, prev)
			}
			titles[b.title] = b.file + ":" + strconv.Itoa(b.line)
			if m := rowTitle.FindStringSubmatch(b.title); m != nil {
				if !strings.HasPrefix(b.file, "section10") {
					t.Errorf("%s:%d: row block outside the section 10 file", b.file, b.line)
				}
				row, _ := strconv.Atoi(m[1])
				rows[row]++
			}
			for _, in := range b.instants {
				for _, c := range in.cmds {
					if !argvSafe(c.args) {
						cliSkipped++
					}
				}
			}
			blocks++
			instants += len(b.instants)
			commands += n
			fileCmds += n
		}
		t.Logf("%s: %d blocks, %d commands", tr.file, len(tr.blocks), fileCmds)
	}
	for row := 1; row <= 43; row++ {
		if rows[row] != 1 {
			t.Errorf("section 10 row %d: %d blocks, want 1", row, rows[row])
		}
	}
	if len(rows) != 43 {
		t.Errorf("section 10: %d distinct rows, want 43", len(rows))
	}
	t.Logf("total: %d files, %d blocks, %d clock instants, %d commands; each is checked by "+
		"raw, go-redis Do and go-redis pipeline replays; redis-cli skips %d (NUL or invalid UTF-8 arguments)",
		len(files), blocks, instants, commands, cliSkipped)
}

// TestTranscriptParser checks that malformed transcripts are rejected, so a
// typo cannot silently drop an expectation.
func TestTranscriptParser(t *testing.T) {
	bad := map[string]string{
		"no reply":            "== b\nCL.THROTTLE k 1 1 1\n",
		"reply first":         "== b\n=> [0]\n",
		"two commands":        "== b\nPING\nPING\n=> +PONG\n",
		"empty block":         "== b\n== c\nPING\n=> +PONG\n",
		"outside block":       "PING\n=> +PONG\n",
		"bad step":            "== b\nat soon\nPING\n=> +PONG\n",
		"bad quote":           "== b\nGET \"k\n=> (nil)\n",
		"glued quote":         "== b\nGET \"k\"x\n=> (nil)\n",
		"bad array":           "== b\nPING\n=> [1,x]\n",
		"trailing space err":  "== b\nPING\n=> -ERR x \n",
		"unknown reply":       "== b\nPING\n=> PONG\n",
		"step before reply":   "== b\nPING\nat +1s\n=> +PONG\n",
		"carriage return":     "== b\r\nPING\n=> +PONG\n",
		"empty array":         "== b\nPING\n=> []\n",
		"unterminated bulks":  "== b\nPING\n=> [\"a\",\"b]\n",
		"bare word has quote": "== b\nGET k\"\n=> (nil)\n",
	}
	for name, src := range bad {
		if _, err := parseTranscript("x.txt", []byte(src)); err == nil {
			t.Errorf("%s: parsed %q without error", name, src)
		}
	}
	good := "# c\n== b\nat 1s\nCL.THROTTLE \"a b\" \"\\x00\" \"\"\n=> -\"x \"\nat +500ms\nGET k\n=> -1\nGET k\n=> [\"a\",\"\\r\\n\"]\n"
	blocks, err := parseTranscript("x.txt", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	b := blocks[0]
	if len(b.instants) != 2 || b.instants[0].at.String() != "1s" || b.instants[1].at.String() != "1.5s" {
		t.Fatalf("instants %+v", b.instants)
	}
	c := b.instants[0].cmds[0]
	if len(c.args) != 4 || c.args[1] != "a b" || c.args[2] != "\x00" || c.args[3] != "" || c.want.kind != replyError || c.want.s != "x " {
		t.Errorf("command %+v", c)
	}
	if w := b.instants[1].cmds[0].want; w.kind != replyInt || w.n != -1 {
		t.Errorf("reply %+v, want integer -1", w)
	}
	if w := b.instants[1].cmds[1].want; w.kind != replyBulks || len(w.strs) != 2 || w.strs[1] != "\r\n" {
		t.Errorf("reply %+v", w)
	}
}
