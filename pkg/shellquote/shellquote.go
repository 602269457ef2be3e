// Package shellquote quotes words for a POSIX shell, for the commands
// Carousel prints for a person to paste: a value from a Secret a tenant may
// write, or a path with a space, must stay one word and run nothing.
package shellquote

import "strings"

// Quote returns s as one word of a POSIX shell: as it is when it holds only
// characters no shell gives a meaning to, single-quoted otherwise.
func Quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,:/=@+%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
