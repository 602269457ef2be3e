package shellquote

import (
	"os/exec"
	"testing"
)

// What Quote returns is one word that a real shell reads back as s, and runs
// nothing: each is echoed by sh, which would otherwise expand, split or run
// it.
func TestAShellReadsTheQuotedWordBack(t *testing.T) {
	for _, s := range []string{"", "plain", "--cert-dir=/var/lib/kubelet/pki", "with space", "it's", "$(touch x)", "`id`", "a;b", "*", "~",
		"tab\there", "new\nline", `back\slash`, "'", "''", "-n", "a=b c"} {
		out, err := exec.Command("sh", "-c", `printf '%s' `+Quote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("sh read %q back as %q (%v); want it as it was", s, out, err)
		}
	}
	if got := Quote("--node-name=worker-1"); got != "--node-name=worker-1" {
		t.Errorf("Quote of a plain word = %s, want it unquoted", got)
	}
}
