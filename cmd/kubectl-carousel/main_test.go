package main

import (
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mainArgsEnv, when set, has the test binary run main with these arguments
// (separated by newlines): the plugin as a process of its own, to signal.
const mainArgsEnv = "KUBECTL_CAROUSEL_TEST_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(mainArgsEnv); ok {
		os.Args = append([]string{"kubectl-carousel"}, strings.Split(args, "\n")...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Ctrl-C while the API server has not answered yet ends kubectl carousel
// kubeconfig --output-file without leaving the file it created: a file left
// behind, empty, would refuse the command run again.
func TestAnInterruptLeavesNoKubeconfigFileBehind(t *testing.T) {
	asked := make(chan struct{}, 1)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		<-r.Context().Done() // never answers
	}))
	defer server.Close()
	dir := t.TempDir()
	file, kubeconfig := filepath.Join(dir, "prod.kubeconfig"), filepath.Join(dir, "management.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"kubeconfig", "prod", "-n", "team-a", "--name", "test", "--output-file", file,
		"--server", server.URL, "--kubeconfig", kubeconfig}
	cmd := exec.Command(os.Args[0]) //nolint:gosec // the test binary itself
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join(args, "\n"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("the plugin never asked the API server; stderr: %s", stderr.String())
	}
	if _, err := os.Lstat(file); err != nil {
		t.Fatalf("the file was not created before the API server was asked: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	var err error
	select {
	case err = <-ended:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("the plugin went on a minute after the interrupt; stderr: %s", stderr.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("the plugin ended with %v, want exit status 1; stderr: %s", err, stderr.String())
	}
	if _, err := os.Lstat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after the interrupt the file is left behind: %v", err)
	}
}

// A write to a stdout whose reader is gone fails, and the command goes on
// to undo what it began; it is not killed by SIGPIPE.
func TestAWriteToAClosedStdoutFails(t *testing.T) {
	if os.Getenv("CAROUSEL_TEST_CLOSED_STDOUT") == "1" {
		writeErrorsOnClosedPipes()
		_, err := os.Stdout.WriteString("the certificate key\n")
		if !errors.Is(err, syscall.EPIPE) {
			os.Exit(3)
		}
		os.Exit(0)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAWriteToAClosedStdoutFails$") //nolint:gosec // the test binary itself
	cmd.Env = append(os.Environ(), "CAROUSEL_TEST_CLOSED_STDOUT=1")
	cmd.Stdout = w
	err = cmd.Run()
	_ = w.Close()
	if err != nil {
		t.Errorf("the process writing to a closed stdout ended with %v (%s), want it to see EPIPE and exit 0", err, cmd.ProcessState)
	}
}
