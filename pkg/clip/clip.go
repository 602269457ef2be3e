// Package clip cuts text to fit a field of the API that has a size limit,
// or one that would otherwise grow with what others write into it.
package clip

import "unicode/utf8"

// ellipsis ends a text that was cut.
const ellipsis = "…"

// Bytes is s cut to at most n bytes at a character boundary, ending in "…"
// when it was longer. n is at least len("…").
func Bytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
