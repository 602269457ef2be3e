package evidence

import (
	"encoding/base64"
	"testing"
)

func TestTokenKeyID(t *testing.T) {
	header := func(json string) string { return base64.RawURLEncoding.EncodeToString([]byte(json)) }
	for _, tc := range []struct{ name, token, want string }{
		{"a JWT", header(`{"alg":"ES256","kid":"abc-_1"}`) + ".e30.sig", "abc-_1"},
		{"no kid", header(`{"alg":"ES256"}`) + ".e30.sig", ""},
		{"not base64url", "%%%.e30.sig", ""},
		{"not JSON", header("kid") + ".e30.sig", ""},
		{"empty", "", ""},
	} {
		if got := TokenKeyID([]byte(tc.token)); got != tc.want {
			t.Errorf("%s: TokenKeyID = %q, want %q", tc.name, got, tc.want)
		}
	}
}
