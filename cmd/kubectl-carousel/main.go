// Command kubectl-carousel is the kubectl plugin of Carousel: install it on
// the PATH and run `kubectl carousel`.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"

	"github.com/carousel-dev/carousel/pkg/plugin"
)

func main() {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	if err := plugin.NewCommand(streams, clock.RealClock{}).Execute(); err != nil {
		plugin.WriteError(os.Stderr, err)
		os.Exit(1)
	}
}
