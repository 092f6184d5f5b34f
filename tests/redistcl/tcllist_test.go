package redistcl

import (
	"fmt"
	"strconv"
	"strings"
)

// splitList splits a Tcl list, as the Redis test framework's
// send_data_packet writes one ([list $status $data $elapsed]), into its
// elements: braced elements verbatim, quoted and bare ones with Tcl's
// backslash substitutions.
func splitList(s string) ([]string, error) {
	var out []string
	i := 0
	for {
		for i < len(s) && isListSpace(s[i]) {
			i++
		}
		if i >= len(s) {
			return out, nil
		}
		switch s[i] {
		case '{':
			depth, j := 1, i+1
			for ; j < len(s) && depth > 0; j++ {
				switch s[j] {
				case '\\':
					j++
				case '{':
					depth++
				case '}':
					depth--
				}
			}
			if depth != 0 {
				return nil, fmt.Errorf("unmatched open brace in list")
			}
			out = append(out, s[i+1:j-1])
			i = j
		case '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unmatched open quote in list")
			}
			out = append(out, unbackslash(s[i+1:j]))
			i = j + 1
		default:
			j := i
			for j < len(s) && !isListSpace(s[j]) {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j > len(s) {
				j = len(s)
			}
			out = append(out, unbackslash(s[i:j]))
			i = j
		}
	}
}

func isListSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// unbackslash applies Tcl's backslash substitutions (the ones Tcl's list
// quoting produces, plus \xhh and \uhhhh).
func unbackslash(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch c := s[i]; c {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'v':
			b.WriteByte('\v')
		case 'f':
			b.WriteByte('\f')
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'x', 'u':
			n := 2
			if c == 'u' {
				n = 4
			}
			j := i + 1
			for j < len(s) && j < i+1+n && isHex(s[j]) {
				j++
			}
			if j == i+1 {
				b.WriteByte(c)
				continue
			}
			v, _ := strconv.ParseUint(s[i+1:j], 16, 32)
			b.WriteRune(rune(v))
			i = j - 1
		case '\n':
			b.WriteByte(' ')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
