// Package docs holds cellserver's documentation pages; README.md, at the
// root of the repository, is their front page. This test keeps the links
// between them working: every relative link of README.md, docs/*.md and
// bench/README.md names a file or directory of the repository, and every
// #anchor a heading of the page it points into.
package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"
)

// pages are the markdown files whose links are checked, relative to the
// repository's root.
func pages(t *testing.T, root fs.FS) []string {
	t.Helper()
	docs, err := fs.Glob(root, "docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md")
	}
	return append([]string{"README.md", "bench/README.md"}, docs...)
}

// TestLinks checks every relative link and #anchor of README.md,
// bench/README.md and docs/*.md.
func TestLinks(t *testing.T) {
	root := os.DirFS("..")
	for _, p := range checkLinks(root, pages(t, root)) {
		t.Error(p)
	}
}

// TestReadmeFrontPage: README.md stays a front page (at most 500 lines)
// whose first screen gives the two commands a newcomer needs.
func TestReadmeFrontPage(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) > 500 {
		t.Errorf("README.md has %d lines, more than 500: move the detail into docs/", len(lines))
	}
	first := lines[:min(len(lines), 30)]
	for _, cmd := range []string{"go run ./cmd/cellserver ", "make test "} {
		found := false
		for _, l := range first {
			found = found || strings.HasPrefix(l, cmd)
		}
		if !found {
			t.Errorf("README.md's first 30 lines have no line starting %q", cmd)
		}
	}
}

// TestCheckLinksFindsBrokenOnes runs the checker on pages with known
// faults, so that TestLinks passing means something.
func TestCheckLinksFindsBrokenOnes(t *testing.T) {
	root := fstest.MapFS{
		"README.md": {Data: []byte("# Top\n\n" +
			"[ok](docs/a.md#b-c) [ok](docs/a.md#b-c-1) [ok](#top) [ok](docs/) [ok](https://example.com/x#y)\n" +
			"[gone](docs/gone.md) [bad anchor](docs/a.md#nope) [`code`](docs/a.md#code-here)\n" +
			"`[in code](nope.md)`\n" +
			"```\n[in a block](nope.md)\n# not a heading\n```\n" +
			"[ref]: docs/missing.md\n")},
		"docs/a.md": {Data: []byte("# A\n\n## B, c!\n\n## B c\n\n## `Code` here\n\n" +
			"[back](../README.md#top) [up](../../outside.md) [self](#not-a-heading) [no anchor](../go.mod#x)\n")},
		"go.mod": {Data: []byte("module x\n")},
	}
	got := checkLinks(root, []string{"README.md", "docs/a.md"})
	want := []string{
		`README.md:4: docs/gone.md: no such file or directory`,
		`README.md:4: docs/a.md#nope: no heading "nope" in docs/a.md`,
		`README.md:10: docs/missing.md: no such file or directory`,
		`docs/a.md:9: ../../outside.md: outside the repository`,
		`docs/a.md:9: #not-a-heading: no heading "not-a-heading" in docs/a.md`,
		`docs/a.md:9: ../go.mod#x: an anchor into go.mod, which is not markdown`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("checkLinks found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

var (
	// inlineLink matches [text](target) and ![alt](target), with an
	// optional "title"; the text may hold code spans.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// refDef matches a reference definition, [name]: target.
	refDef = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+(\S+)`)
	// codeSpan matches an inline code span.
	codeSpan = regexp.MustCompile("`[^`]*`")
	// heading matches an ATX heading.
	heading = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	// scheme marks an absolute URL (https:, mailto:, ...).
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// checkLinks returns one line per broken link in files (paths in root).
func checkLinks(root fs.FS, files []string) []string {
	var problems []string
	anchors := map[string]map[string]bool{} // markdown file -> its anchors
	anchorsOf := func(file string) (map[string]bool, error) {
		if a, ok := anchors[file]; ok {
			return a, nil
		}
		b, err := fs.ReadFile(root, file)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchors[file] = a
		return a, nil
	}
	for _, file := range files {
		b, err := fs.ReadFile(root, file)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", file, err))
			continue
		}
		for _, l := range markdownLinks(string(b)) {
			if scheme.MatchString(l.target) {
				continue
			}
			bad := func(format string, args ...any) {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", file, l.line, l.target, fmt.Sprintf(format, args...)))
			}
			target, frag, _ := strings.Cut(l.target, "#")
			dest := file
			if target != "" {
				dest = path.Join(path.Dir(file), target)
				if dest == ".." || strings.HasPrefix(dest, "../") {
					bad("outside the repository")
					continue
				}
				if _, err := fs.Stat(root, dest); err != nil {
					bad("no such file or directory")
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				bad("an anchor into %s, which is not markdown", dest)
				continue
			}
			a, err := anchorsOf(dest)
			if err != nil {
				bad("%v", err)
				continue
			}
			if !a[frag] {
				bad("no heading %q in %s", frag, dest)
			}
		}
	}
	return problems
}

type link struct {
	line   int
	target string
}

// markdownLinks returns the link targets of a markdown text, outside
// fenced code blocks and code spans.
func markdownLinks(text string) []link {
	var links []link
	fence := ""
	for i, l := range strings.Split(text, "\n") {
		if inFence(l, &fence) {
			continue
		}
		if m := refDef.FindStringSubmatch(l); m != nil {
			links = append(links, link{i + 1, m[1]})
			continue
		}
		l = codeSpan.ReplaceAllString(l, "``")
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			links = append(links, link{i + 1, m[1]})
		}
	}
	return links
}

// fenceMarker reports whether l opens or closes a fenced code block (up
// to three spaces of indentation are allowed, and list items indent
// theirs further), and returns its run of backticks or tildes.
func fenceMarker(l string) (string, bool) {
	t := strings.TrimLeft(l, " ")
	for _, c := range []string{"```", "~~~"} {
		if strings.HasPrefix(t, c) {
			n := len(t) - len(strings.TrimLeft(t, c[:1]))
			return t[:n], true
		}
	}
	return "", false
}

// inFence reports whether l belongs to a fenced code block (its opening
// or closing line included), given the fence open before it, which it
// updates.
func inFence(l string, fence *string) bool {
	if f, ok := fenceMarker(l); ok {
		switch {
		case *fence == "":
			*fence = f
		case strings.HasPrefix(f, *fence):
			*fence = ""
		}
		return true
	}
	return *fence != ""
}

// headingAnchors returns the anchors GitHub gives a markdown text's
// headings: the heading's text, lower-cased, without punctuation, spaces
// turned into '-', and "-1", "-2", ... after repeats.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for _, l := range strings.Split(text, "\n") {
		if inFence(l, &fence) {
			continue
		}
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			anchors[s] = true
		}
		seen[s]++
	}
	return anchors
}

// linkText turns [text](target) into text in a heading.
var linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor for a heading's text.
func slug(h string) string {
	h = linkText.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
