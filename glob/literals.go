package glob

// Literals are the literal ends of a Redis glob: every key the glob
// matches starts with Prefix and ends with Suffix, the two not
// overlapping (a key is at least len(Prefix)+len(Suffix) long). Exact: the
// glob is all literal, and matches the key Prefix only.
type Literals struct {
	Prefix, Suffix string
	Exact          bool
}

// LiteralsOf finds g's literal ends. It reads the glob token by token as
// the matcher does (Redis's stringmatchlen, KEYS: '*', '?', a '[...]'
// class with '\' escapes and x-y ranges, unterminated at the end of the
// glob, '\' escaping the next byte outside a class, a trailing '\' itself)
// and keeps the literal bytes before the first token that is not a
// literal and after the last one. The matcher consumes the tokens in
// order, each literal one byte equal to itself, so a key it matches has
// them at its ends.
func LiteralsOf(g []byte) Literals {
	var lits []byte   // the literal bytes since the last wildcard
	var prefix []byte // set at the first wildcard
	wild := false
	for i := 0; i < len(g); {
		c := g[i]
		switch c {
		case '*', '?':
			i++
		case '[':
			i++
			if i < len(g) && g[i] == '^' {
				i++
			}
			for i < len(g) {
				if g[i] == '\\' && i+1 < len(g) {
					i += 2
				} else if g[i] == ']' {
					break
				} else if i+2 < len(g) && g[i+1] == '-' {
					i += 3
				} else {
					i++
				}
			}
			i++ // the ']', or past the end of an unterminated class
		case '\\':
			if i+1 < len(g) {
				c = g[i+1]
				i++
			}
			fallthrough
		default:
			lits = append(lits, c)
			i++
			continue
		}
		if !wild {
			prefix, wild = lits, true
		}
		lits = nil
	}
	if !wild {
		return Literals{Prefix: string(lits), Exact: true}
	}
	return Literals{Prefix: string(prefix), Suffix: string(lits)}
}
