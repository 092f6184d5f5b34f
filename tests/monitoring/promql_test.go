package monitoring

import (
	"fmt"
	"regexp"
	"strings"
)

// aggregations are PromQL's aggregation operators: an identifier that may
// be followed by "by (...)" or "without (...)" before its parenthesis, so
// not recognisable as a function by the "(" after it.
var aggregations = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// labelListKeywords take a parenthesised list of label names (optional after
// group_left and group_right).
var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// keywords are PromQL's other reserved words (binary operators, modifiers,
// number literals).
var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"inf": true, "nan": true,
}

// metricNames returns the metric names a PromQL expression selects: the
// identifiers that are not functions, aggregations, keywords, label names
// (in {...} or in by/without/on/ignoring lists), strings, numbers or
// durations. It is a lexer, not a parser: promtool parses the expressions
// (check rules); this only finds the names to check against /metrics. An
// expression it cannot lex (an unclosed string or bracket) is an error.
func metricNames(expr string) ([]string, error) {
	var names []string
	s := expr
	i := 0
	// skipTo returns the index just past the bracket closing the one at
	// s[i], skipping strings inside.
	skipTo := func(i int, open, close byte) (int, error) {
		depth := 0
		for j := i; j < len(s); j++ {
			switch c := s[j]; c {
			case '"', '\'', '`':
				end, err := skipString(s, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case open:
				depth++
			case close:
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unclosed %q at offset %d in %q", open, i, expr)
	}
	nextNonSpace := func(j int) int {
		for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r') {
			j++
		}
		return j
	}
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(s, i)
			if err != nil {
				return nil, fmt.Errorf("%v in %q", err, expr)
			}
			i = end
		case c == '{':
			end, err := skipTo(i, '{', '}')
			if err != nil {
				return nil, err
			}
			i = end
		case c == '[':
			end, err := skipTo(i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = end
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case isDigit(c) || (c == '.' && i+1 < len(s) && isDigit(s[i+1])):
			// A number or a duration (5m, 1e3, 0x1f, 1h30m).
			for i < len(s) && (isIdent(s[i]) || s[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := s[i:j]
			i = j
			lower := strings.ToLower(word)
			next := nextNonSpace(i)
			switch {
			case labelListKeywords[lower]:
				if next < len(s) && s[next] == '(' {
					end, err := skipTo(next, '(', ')')
					if err != nil {
						return nil, err
					}
					i = end
				}
			case keywords[lower], aggregations[lower]:
			case next < len(s) && s[next] == '(':
				// A function call.
			default:
				names = append(names, word)
			}
		default:
			i++
		}
	}
	return names, nil
}

// skipString returns the index just past the string literal starting at
// s[i] (", ' or `; backslash escapes in the first two).
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unclosed string at offset %d", i)
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c == ':' || (c|0x20) >= 'a' && (c|0x20) <= 'z' }
func isIdent(c byte) bool      { return isIdentStart(c) || isDigit(c) }

// ruleExprs returns the expressions (expr:) and recorded names (record:) of
// a Prometheus rules file. No YAML library: the file's expressions are
// either on the expr: line or in a "|" block below it, and any other form
// is refused, so a change of style is noticed rather than skipped. The
// count is checked against promtool's.
func ruleExprs(text string) (exprs, records []string, err error) {
	lines := strings.Split(text, "\n")
	for n := 0; n < len(lines); n++ {
		line := lines[n]
		t := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "- "))
		switch {
		case strings.HasPrefix(t, "record:"):
			records = append(records, strings.TrimSpace(strings.TrimPrefix(t, "record:")))
		case strings.HasPrefix(t, "expr:"):
			v := strings.TrimSpace(strings.TrimPrefix(t, "expr:"))
			switch {
			case v == "|":
				indent := len(line) - len(strings.TrimLeft(line, " "))
				var b strings.Builder
				for n+1 < len(lines) {
					l := lines[n+1]
					if strings.TrimSpace(l) != "" && len(l)-len(strings.TrimLeft(l, " ")) <= indent {
						break
					}
					b.WriteString(l)
					b.WriteByte('\n')
					n++
				}
				exprs = append(exprs, b.String())
			case v == "" || strings.HasPrefix(v, ">") || strings.HasPrefix(v, "|"):
				return nil, nil, fmt.Errorf("line %d: expr in a form this check does not read (use one line or \"|\"): %q", n+1, line)
			case strings.HasPrefix(v, "'") && strings.HasSuffix(v, "'"):
				exprs = append(exprs, strings.ReplaceAll(v[1:len(v)-1], "''", "'"))
			case strings.HasPrefix(v, "\""):
				return nil, nil, fmt.Errorf("line %d: double-quoted expr, not read by this check: %q", n+1, line)
			default:
				exprs = append(exprs, v)
			}
		}
	}
	return exprs, records, nil
}

// seriesRE finds the metric name of an input series of a promtool test
// file (series: 'name{labels}').
var seriesRE = regexp.MustCompile(`(?m)^\s*-?\s*series:\s*['"]?([a-zA-Z_:][a-zA-Z0-9_:]*)`)

// labelValuesRE finds the metric of a Grafana label_values(metric{...},
// label) variable query.
var labelValuesRE = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)
