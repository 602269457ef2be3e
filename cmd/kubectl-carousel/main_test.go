package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

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
	cmd := exec.Command(os.Args[0], "-test.run=^TestAWriteToAClosedStdoutFails$")
	cmd.Env = append(os.Environ(), "CAROUSEL_TEST_CLOSED_STDOUT=1")
	cmd.Stdout = w
	err = cmd.Run()
	_ = w.Close()
	if err != nil {
		t.Errorf("the process writing to a closed stdout ended with %v (%s), want it to see EPIPE and exit 0", err, cmd.ProcessState)
	}
}
