// Command kubectl-carousel is the kubectl plugin of Carousel: install it on
// the PATH and run `kubectl carousel`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"

	"github.com/carousel-dev/carousel/pkg/plugin"
)

func main() {
	// An interrupt cancels what the command is doing, which then undoes
	// what it left half done (a file created, not filled) and exits; a
	// second one ends it at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	writeErrorsOnClosedPipes()
	go func() {
		<-ctx.Done()
		stop()
	}()
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	if err := plugin.NewCommand(streams, clock.RealClock{}).ExecuteContext(ctx); err != nil {
		plugin.WriteError(os.Stderr, err)
		os.Exit(1)
	}
}

// writeErrorsOnClosedPipes has a write to a stdout or stderr whose reader is
// gone (| head) fail with EPIPE, as any other write error, instead of the
// SIGPIPE that the Go runtime otherwise lets kill the process: a command
// then undoes what it began, as certs upload deletes the copy whose key it
// could not print. Notified, not ignored: an ignored signal stays ignored in
// the credential plugins a kubeconfig has it run, a handler does not.
func writeErrorsOnClosedPipes() { signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) }
