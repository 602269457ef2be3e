// Command sharder runs the sharder of github.com/timebertt/kubernetes-controller-sharding (its controllers and
// its webhook, unchanged) for the test suites: upstream's command binds its webhook server to every interface on
// port 9443 and takes its webhook target only from a config file, so this one wires the same parts with the
// webhook on --webhook-host:--webhook-port and the webhook configuration pointed at --webhook-url, trusting
// --webhook-ca-file. Leader election is off: a suite runs one sharder.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	configv1alpha1 "github.com/timebertt/kubernetes-controller-sharding/pkg/apis/config/v1alpha1"
	shardingv1alpha1 "github.com/timebertt/kubernetes-controller-sharding/pkg/apis/sharding/v1alpha1"
	"github.com/timebertt/kubernetes-controller-sharding/pkg/controller"
	utilclient "github.com/timebertt/kubernetes-controller-sharding/pkg/utils/client"
	shardingwebhook "github.com/timebertt/kubernetes-controller-sharding/pkg/webhook"
)

func main() {
	host := flag.String("webhook-host", "127.0.0.1", "Address the webhook server binds to.")
	port := flag.Int("webhook-port", 9443, "Port of the webhook server.")
	certDir := flag.String("webhook-cert-dir", "", "Directory with the webhook server's tls.crt and tls.key.")
	url := flag.String("webhook-url", "", "URL the API server calls the webhook at.")
	caFile := flag.String("webhook-ca-file", "", "CA bundle the API server verifies the webhook with.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if err := run(ctrl.SetupSignalHandler(), *host, *port, *certDir, *url, *caFile); err != nil {
		fmt.Fprintln(os.Stderr, "sharder:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, host string, port int, certDir, url, caFile string) error {
	caBundle, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	config := &configv1alpha1.SharderConfig{}
	utilclient.SharderScheme.Default(config)
	config.Webhook.Config.ClientConfig.Service = nil
	config.Webhook.Config.ClientConfig.URL = ptr.To(url)
	config.Webhook.Config.ClientConfig.CABundle = caBundle

	ring, err := labels.NewRequirement(shardingv1alpha1.LabelControllerRing, selection.Exists, nil)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 utilclient.SharderScheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          webhook.NewServer(webhook.Options{Host: host, Port: port, CertDir: certDir}),
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Label: labels.NewSelector().Add(*ring)},
		}},
	})
	if err != nil {
		return err
	}
	if err := controller.AddToManager(ctx, mgr, config); err != nil {
		return err
	}
	if err := shardingwebhook.AddToManager(ctx, mgr, config); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
