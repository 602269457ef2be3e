package plugin

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"
)

// run runs kubectl carousel with args and returns its error.
func run(args ...string) error {
	var out bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out}, clock.RealClock{})
	cmd.SetArgs(args)
	return cmd.Execute()
}

func TestACommandWithoutItsClusterSaysHowToCallIt(t *testing.T) {
	for _, args := range [][]string{
		{"rotation", "status"},
		{"rotation", "start", "a", "b"},
		{"certs", "check-expiration"},
		{"kubeconfig"},
	} {
		err := run(args...)
		if err == nil || !strings.Contains(err.Error(), "takes the name of one Cluster") || !strings.Contains(err.Error(), " CLUSTER ") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

func TestWithoutAKubeconfigItSaysWhatToPointAtTheManagementCluster(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", filepath.Join(home, "none"))
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if err := run("rotation", "status", "prod"); !errors.Is(err, errNoKubeconfig) {
		t.Fatalf("err = %v, want %v", err, errNoKubeconfig)
	}
	// An explicit server is taken at its word (and refused here: nothing listens on port 1).
	if err := run("rotation", "status", "prod", "--server", "https://127.0.0.1:1"); errors.Is(err, errNoKubeconfig) {
		t.Fatalf("--server: err = %v", err)
	}
}
