// Command kubectl-carousel is the kubectl plugin of Carousel: install it on
// the PATH and run `kubectl carousel`.
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/utils/clock"

	"github.com/carousel-dev/carousel/pkg/plugin"
)

func main() {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	if err := plugin.NewCommand(streams, clock.RealClock{}).Execute(); err != nil {
		// Escaped as the command's own output is: an error can quote a
		// managed API server's answer.
		_ = printers.WriteEscaped(os.Stderr, fmt.Sprintln("error:", err))
		os.Exit(1)
	}
}
