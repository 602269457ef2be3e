package plugin

import (
	"fmt"
	"io"
	"strings"
	"unicode"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// escapedStreams returns streams whose Out and ErrOut escape the terminal's
// control characters but tab and newline: ESC and CR as kubectl does for
// what it describes (printers.WriteEscaped), and the others, which it leaves
// (backspaces move the cursor back over what a line printed before them):
// escapeOtherControls. What the plugin prints carries text that others
// chose: a condition's message can hold a managed API server's answer, and
// the managed cluster may be a tenant's, who must not rewrite an admin's
// screen, hide a line of it, or reach the clipboard through an escape
// sequence. JSON and YAML output never hold these characters raw, but DEL
// in JSON, which is escaped as JSON would (\u007f): escaping changes none
// of what they say.
func escapedStreams(s genericiooptions.IOStreams) genericiooptions.IOStreams {
	s.Out, s.ErrOut = escaping{s.Out}, escaping{s.ErrOut}
	return s
}

// WriteError writes err to w as kubectl does ("error: ..."), its control
// characters escaped as the plugin's own output is (escapedStreams): an
// error can quote a managed API server's answer or an admission webhook's.
func WriteError(w io.Writer, err error) {
	_, _ = fmt.Fprintln(escaping{w}, "error:", err)
}

// escaping writes to w with the terminal's control characters escaped.
type escaping struct{ w io.Writer }

func (e escaping) Write(p []byte) (int, error) {
	if err := printers.WriteEscaped(e.w, escapeOtherControls(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// escapeOtherControls escapes the control characters printers.WriteEscaped
// leaves as they are: those of C0 but tab, newline, ESC and CR in caret
// notation (^H), and DEL and those of C1 (U+0080 to U+009F, which some
// terminals act on in UTF-8 too) as \u007f and \u0080: JSON escapes of the
// same characters, for encoding/json writes DEL raw.
func escapeOtherControls(s string) string {
	if !strings.ContainsFunc(s, isOtherControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !isOtherControl(r):
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString("^" + string(r+'@'))
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return b.String()
}

func isOtherControl(r rune) bool {
	return unicode.IsControl(r) && !strings.ContainsRune("\t\n\x1b\r", r)
}

// oneLine is s, text that others chose (a condition's message that quotes a
// managed API server, a name a managed cluster returned), with its newlines
// and tabs escaped as \n and \t: printed in a line or a table cell, it
// could otherwise start a line of its own that looks like the plugin's
// ("Phase: Completed"), or shift the table's columns.
func oneLine(s string) string { return lineBreaks.Replace(s) }

var lineBreaks = strings.NewReplacer("\n", `\n`, "\t", `\t`)
