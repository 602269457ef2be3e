package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// A condition message that quotes a managed API server's answer reaches the
// admin's terminal with its escape sequences escaped: here one that would
// write to the clipboard (OSC 52), one that would clear the screen, and
// backspaces that would move the cursor back over the condition's status.
func TestTextFromAManagedClusterCannotDriveTheTerminal(t *testing.T) {
	hostile := "the API server answered: \x1b]52;c;Y3VybCBldmlsfHNo\a\x1b[2J\rall fine\b\b\x7f\u009b2J"
	got := rotationStatusWith(t, metav1.Condition{Type: v1alpha1.ConditionControlPlaneReachable,
		Status: metav1.ConditionFalse, Reason: "Unreachable", Message: hostile})
	switch {
	case !strings.Contains(got, "the API server answered: "):
		t.Fatalf("the condition is not shown:\n%s", got)
	case strings.ContainsAny(got, "\x1b\r\a\b\x7f\u009b"):
		t.Errorf("a control character reaches the terminal: %q", got)
	case !strings.Contains(got, `^[]52;c;Y3VybCBldmlsfHNo^G^[[2J\rall fine^H^H\u007f\u009b2J`):
		t.Errorf("the message is not shown escaped: %q", got)
	}
}

// A condition message cannot forge a line of rotation status, nor shift the
// columns of its tables: its newlines and tabs are shown escaped.
func TestTextFromAManagedClusterCannotForgeALine(t *testing.T) {
	forged := "the API server answered: x\nPhase:\tCompleted"
	got := rotationStatusWith(t, metav1.Condition{Type: v1alpha1.ConditionCARotation, Status: metav1.ConditionTrue, Reason: "WaitingForTrust", Message: forged})
	if strings.Contains(got, "Completed") && !strings.Contains(got, `x\nPhase:\tCompleted`) {
		t.Errorf("the message is not shown escaped:\n%s", got)
	}
	for line := range strings.Lines(got) {
		if strings.HasPrefix(line, "Phase:") && strings.Contains(line, "Completed") {
			t.Errorf("the message forged a line: %q in\n%s", line, got)
		}
	}
	if n := strings.Count(got, `x\nPhase:\tCompleted`); n != 2 {
		t.Errorf("the message is shown escaped %d times, want 2 (waiting for, conditions):\n%s", n, got)
	}
}

// rotationStatusWith is what kubectl carousel rotation status prints, on
// stdout and stderr, of a Cluster with the condition cond.
func rotationStatusWith(t *testing.T, cond metav1.Condition) string {
	t.Helper()
	cl := &v1alpha1.Cluster{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Cluster"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"},
		Status:     v1alpha1.ClusterStatus{Conditions: []metav1.Condition{cond}}}
	api := httptest.NewServer(fakeDiscoveryAnd(t, "/apis/carousel.dev/v1alpha1/namespaces/team-a/clusters/prod", cl))
	defer api.Close()
	var out bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out}, clock.RealClock{})
	cmd.SetArgs([]string{"rotation", "status", "prod", "-n", "team-a", "--server", api.URL})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// An error is escaped as the output is: it can quote an admission webhook's
// or a managed API server's answer.
func TestAnErrorCannotDriveTheTerminal(t *testing.T) {
	var out bytes.Buffer
	WriteError(&out, errors.New("denied: \x1b[2J\b\x7f\u009b2J"))
	if got, want := out.String(), "error: denied: ^[[2J^H\\u007f\\u009b2J\n"; got != want {
		t.Errorf("WriteError wrote %q, want %q", got, want)
	}
}

// The API server's warnings reach stderr, as kubectl prints them.
func TestAPIWarningsReachStderr(t *testing.T) {
	cl := &v1alpha1.Cluster{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Cluster"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	serve := fakeDiscoveryAnd(t, "/apis/carousel.dev/v1alpha1/namespaces/team-a/clusters/prod", cl)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/clusters/prod") {
			w.Header().Add("Warning", `299 - "cluster team-a/prod: start a CA rotation"`)
		}
		serve.ServeHTTP(w, r)
	}))
	defer api.Close()

	var out, errOut bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut}, clock.RealClock{})
	cmd.SetArgs([]string{"rotation", "status", "prod", "-n", "team-a", "--server", api.URL})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got := errOut.String(); !strings.Contains(got, "Warning: cluster team-a/prod: start a CA rotation") {
		t.Errorf("stderr %q, want the API server's warning", got)
	}
}

// fakeDiscoveryAnd plays an API server that serves Carousel's API group and
// obj at path.
func fakeDiscoveryAnd(t *testing.T, path string, obj any) http.Handler {
	t.Helper()
	gv := v1alpha1.SchemeGroupVersion
	responses := map[string]any{
		"/api": metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}},
		"/apis": metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList"}, Groups: []metav1.APIGroup{{Name: gv.Group,
			Versions:         []metav1.GroupVersionForDiscovery{{GroupVersion: gv.String(), Version: gv.Version}},
			PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}}}},
		"/apis/" + gv.String(): metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList"}, GroupVersion: gv.String(),
			APIResources: []metav1.APIResource{{Name: "clusters", Namespaced: true, Kind: "Cluster", Verbs: metav1.Verbs{"get", "list"}}}},
		path: obj,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := responses[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(body); err != nil {
			t.Error(err)
		}
	})
}

// JSON output says what it said once escaped: encoding/json writes DEL and
// the C1 controls raw or as \u escapes, and the escaping writes them as
// JSON escapes of the same characters.
func TestEscapingKeepsWhatJSONSays(t *testing.T) {
	message := "fine\x7f\u009b2J"
	encoded, err := json.Marshal(map[string]string{"message": message})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := (escaping{&out}).Write(encoded); err != nil {
		t.Fatal(err)
	}
	var decoded map[string]string
	if err := json.Unmarshal(out.Bytes(), &decoded); err != nil || decoded["message"] != message {
		t.Errorf("escaped JSON %s decodes to %q (%v), want %q", out.Bytes(), decoded["message"], err, message)
	}
	if bytes.ContainsAny(out.Bytes(), "\x7f\u009b") {
		t.Errorf("a control character reaches the terminal: %q", out.Bytes())
	}
}
