package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"short", "abc", 8, "abc"},
		{"at the limit", "abcdefgh", 8, "abcdefgh"},
		{"one byte over", "abcdefghi", 8, "abcde…"},
		{"a character across the cut", "abcdé€", 8, "abcd…"},
	} {
		got := Bytes(tc.s, tc.n)
		if got != tc.want || len(got) > tc.n || !utf8.ValidString(got) {
			t.Errorf("%s: Bytes(%q, %d) = %q (%d bytes), want %q", tc.name, tc.s, tc.n, got, len(got), tc.want)
		}
		if got != tc.s && !strings.HasPrefix(tc.s, strings.TrimSuffix(got, "…")) {
			t.Errorf("%s: %q is not a prefix of %q", tc.name, got, tc.s)
		}
	}
}
