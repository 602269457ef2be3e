// Command fake-cri serves the CRI (runtime and image services) on a unix
// socket with k8s.io/cri-client's in-memory fake runtime, so that a real
// kubelet runs on a machine without a container runtime. Pods reach Running
// without any process being started. The e2e framework runs one per node.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

func main() {
	endpoint := flag.String("endpoint", "", "CRI endpoint to serve, unix:///path/to/socket")
	flag.Parse()
	if *endpoint == "" {
		fmt.Fprintln(os.Stderr, "fake-cri: --endpoint is required")
		os.Exit(2)
	}
	rt := fake.NewFakeRemoteRuntime()
	// Without image sizes a pod never reaches Running, and without an image
	// filesystem the kubelet's /stats/summary fails.
	rt.ImageService.SetFakeImageSize(1 << 20)
	fs := []*runtimeapi.FilesystemUsage{{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: "/var/lib/fake-cri"},
		UsedBytes:  &runtimeapi.UInt64Value{Value: 1 << 20},
		InodesUsed: &runtimeapi.UInt64Value{Value: 16},
	}}
	rt.ImageService.SetFakeFilesystemUsage(fs)
	rt.ImageService.SetFakeContainerFilesystemUsage(fs)
	if err := rt.Start(*endpoint); err != nil {
		fmt.Fprintln(os.Stderr, "fake-cri:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "fake-cri: serving", *endpoint)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	<-stop
	rt.Stop()
}
