// Package glob is Redis's glob (stringmatchlen in util.c), the one
// grammar of KEYS, SCAN MATCH, PSUBSCRIBE, COMMAND LIST FILTERBY PATTERN,
// CONFIG GET and the policy file's override globs: Match matches a string
// against a glob, and LiteralsOf finds the literal ends every match has
// (so that a caller can refuse most strings without matching).
package glob

// Match reports whether str matches the Redis glob pattern (stringmatchlen
// in Redis's util.c): '*' any run, '?' any byte, '[...]' a class with ranges
// and '^' negation, '\' escapes the next byte. nocase folds ASCII case.
func Match(pattern, str []byte, nocase bool) bool {
	if !nocase {
		if m, ok := matchSimple(pattern, str); ok {
			return m
		}
	}
	skipLonger := false
	return matchDepth(pattern, str, nocase, &skipLonger, 0)
}

// matchSimple answers, in one pass, what matchDepth answers for the two
// patterns checked most often: a literal (a key name), and a literal
// followed by stars (a key prefix: an ACL user's ~team:*, checked on every
// command). For a prefix pattern that is a string that starts with the
// literal, the empty string excepted (Redis: "*" does not match "").
// ok is false for any other pattern.
func matchSimple(p, s []byte) (match, ok bool) {
	same := true // s starts with p[:i]
	for i, c := range p {
		switch c {
		case '*':
			for _, c := range p[i+1:] {
				if c != '*' {
					return false, false
				}
			}
			return same && len(s) > 0, true
		case '?', '[', '\\':
			return false, false
		}
		if same && (i >= len(s) || s[i] != c) {
			same = false
		}
	}
	return same && len(s) == len(p), true
}

func lowerByte(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// signedChar is b as a C char on x86-64, where Redis compares the bounds
// of a [x-y] range as signed: bytes 0x80-0xff are -128..-1 there.
func signedChar(b byte) int { return int(int8(b)) }

func lowerInt(c int) int {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// matchDepth is stringmatchlen_impl. skipLonger is Redis's
// skipLongerMatches (the fix of CVE-2022-36021): once the rest of the
// pattern after a '*' matched at no position of the rest of the string, no
// earlier '*' can help by matching more, so the search stops instead of
// trying exponentially many splits.
func matchDepth(p, s []byte, nocase bool, skipLonger *bool, depth int) bool {
	if depth > 1000 { // Redis bounds the recursion the same way
		return false
	}
	for len(p) > 0 && len(s) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for len(s) > 0 {
				if matchDepth(p[1:], s, nocase, skipLonger, depth+1) {
					return true
				}
				if *skipLonger {
					return false
				}
				s = s[1:]
			}
			*skipLonger = true
			return false
		case '?':
			s = s[1:]
		case '[':
			p = p[1:]
			not := len(p) > 0 && p[0] == '^'
			if not {
				p = p[1:]
			}
			match := false
			for {
				if len(p) == 0 {
					break
				}
				if p[0] == '\\' && len(p) >= 2 {
					p = p[1:]
					if p[0] == s[0] {
						match = true
					}
				} else if p[0] == ']' {
					break
				} else if len(p) >= 3 && p[1] == '-' {
					start, end := signedChar(p[0]), signedChar(p[2])
					if start > end {
						start, end = end, start
					}
					c := signedChar(s[0])
					if nocase {
						start, end, c = lowerInt(start), lowerInt(end), lowerInt(c)
					}
					p = p[2:]
					if c >= start && c <= end {
						match = true
					}
				} else if nocase {
					if lowerByte(p[0]) == lowerByte(s[0]) {
						match = true
					}
				} else if p[0] == s[0] {
					match = true
				}
				p = p[1:]
			}
			if len(p) == 0 { // unterminated class: Redis treats the end as ']'
				p = []byte{']'}
			}
			if not {
				match = !match
			}
			if !match {
				return false
			}
			s = s[1:]
		case '\\':
			if len(p) >= 2 {
				p = p[1:]
			}
			fallthrough
		default:
			if nocase {
				if lowerByte(p[0]) != lowerByte(s[0]) {
					return false
				}
			} else if p[0] != s[0] {
				return false
			}
			s = s[1:]
		}
		p = p[1:]
		if len(s) == 0 {
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			break
		}
	}
	return len(p) == 0 && len(s) == 0
}
