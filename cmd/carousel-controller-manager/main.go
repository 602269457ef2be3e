// Command carousel-controller-manager runs Carousel's controllers against a
// management cluster. This first version wires the manager itself: the API
// scheme, leader election, metrics and health probes; the controllers are
// registered here as they are added.
package main

import (
	"flag"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	carouselv1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

func main() {
	var (
		metricsAddr, probeAddr, leaderElectionNamespace string
		leaderElect                                     bool
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; \"0\" disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease; defaults to the Pod's namespace.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		log.Error(err, "registering the Kubernetes API types")
		os.Exit(1)
	}
	if err := carouselv1alpha1.AddToScheme(scheme); err != nil {
		log.Error(err, "registering the Carousel API types")
		os.Exit(1)
	}

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "carousel-controller-manager.carousel.dev",
		LeaderElectionNamespace: leaderElectionNamespace,
	})
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "adding the health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "adding the readiness check")
		os.Exit(1)
	}
	log.Info("starting the manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "running the manager")
		os.Exit(1)
	}
}
