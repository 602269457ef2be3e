package plugin

import (
	"io"
	"strings"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// escapedStreams returns streams whose Out and ErrOut escape the terminal's
// control characters but tab and newline: ESC and CR as kubectl does for
// what it describes (printers.WriteEscaped), and the others, which it leaves
// (backspaces move the cursor back over what a line printed before them), as
// ^X. What the plugin prints carries text that others
// chose: a condition's message can hold a managed API server's answer, and
// the managed cluster may be a tenant's, who must not rewrite an admin's
// screen, hide a line of it, or reach the clipboard through an escape
// sequence. JSON and YAML output never hold these characters raw, so
// escaping changes none of it.
func escapedStreams(s genericiooptions.IOStreams) genericiooptions.IOStreams {
	s.Out, s.ErrOut = escaping{s.Out}, escaping{s.ErrOut}
	return s
}

// escaping writes to w with the terminal's control characters escaped.
type escaping struct{ w io.Writer }

func (e escaping) Write(p []byte) (int, error) {
	if err := printers.WriteEscaped(e.w, otherControls.Replace(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// otherControls escapes, in caret notation, the control characters
// printers.WriteEscaped leaves as they are: all of C0 but tab, newline, ESC
// and CR, and DEL.
var otherControls = func() *strings.Replacer {
	var pairs []string
	for c := rune(0); c < 0x20; c++ {
		if !strings.ContainsRune("\t\n\x1b\r", c) {
			pairs = append(pairs, string(c), "^"+string(c+'@'))
		}
	}
	return strings.NewReplacer(append(pairs, "\x7f", "^?")...)
}()
