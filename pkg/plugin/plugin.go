// Package plugin is `kubectl carousel`: start, complete and follow a CA
// rotation, show where it stands, check certificate expiration, and fetch a
// short-lived admin kubeconfig of a managed cluster. It talks to the
// management cluster with the usual kubectl flags (--kubeconfig, --context,
// -n).
package plugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/scheme"
	"github.com/carousel-dev/carousel/pkg/version"
)

// env is what every command needs: the management cluster and the streams.
type env struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	clock   clock.Clock
	// server is the management API server's clock, which its answers set.
	server *serverClock
	// campaignPoll is how often --wait reads a campaign; zero means every
	// 2 s.
	campaignPoll time.Duration
	// ctx is the context of the command that runs, which ends every request
	// to the management cluster when it does; nil for none (a completion).
	ctx context.Context
}

// NewCommand returns the plugin's root command.
func NewCommand(streams genericiooptions.IOStreams, clk clock.Clock) *cobra.Command {
	streams = escapedStreams(streams)
	e := &env{flags: genericclioptions.NewConfigFlags(true), streams: streams, clock: clk, server: &serverClock{local: clk}}
	root := &cobra.Command{
		Use:   "carousel",
		Short: "Rotate and inspect the certificate authorities of Carousel Clusters",
		Long: `kubectl carousel starts, completes and follows the CA rotations of Carousel Clusters, shows where a rotation
stands and what it will do, checks certificate expiration, keeps an encrypted copy of a Cluster's CA keys, and
prints a short-lived admin kubeconfig of a managed cluster.

It talks to the management cluster, where the Clusters are, with kubectl's flags and kubeconfig; -n names the
Clusters' namespace.`,
		Example: `  # Rotate every CA of the Cluster prod: the first phase, then, once your own clients trust the new CAs, the second
  kubectl carousel rotation start prod -n team-a --wait
  kubectl carousel rotation complete prod -n team-a --wait

  # Where does it stand?
  kubectl carousel rotation status prod -n team-a`,
		// kubectl runs kubectl-carousel for "kubectl carousel": help and errors name the command the user types.
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl carousel"},
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Get().String(),
		// A plugin's shell completion goes through kubectl and the kubectl_complete-carousel shim, not a script of
		// its own (docs/reference/kubectl-carousel.md).
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		// Run for every subcommand: cobra runs only the nearest one, so a
		// subcommand must not define its own.
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			e.ctx = cmd.Context()
		},
	}
	root.SetVersionTemplate("kubectl-carousel {{.Version}}\n")
	// Without the -v cobra would add: kubectl's -v is the log level.
	root.Flags().Bool("version", false, "Print the version and exit")
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	e.flags.AddFlags(root.PersistentFlags())

	rotation := &cobra.Command{
		Use:   "rotation",
		Short: "Start, complete and follow a CA rotation",
		Long: `A CA rotation replaces every CA of a Cluster in two phases that you trigger: "start" renews the client
certificates and rolls the nodes while both the old and the new CAs are trusted, until the Cluster is Prepared;
"complete" renews the server certificates and drops the old CAs, until it is Completed. Between the two, hand the
new trust bundles and kubeconfigs to your own clients. "start --without-workers-rollout" prepares the control
plane only and holds the worker pools, which "rollout-workers" then rolls, as many at a time as you name.
"abort", before "complete", takes the rotation back to the old CAs and deletes the new ones.`,
		RunE: groupCommand,
	}
	rotation.AddCommand(e.operationCommand("start", v1alpha1.OperationStartCARotation, v1alpha1.RotationPrepared),
		e.rolloutWorkersCommand(), e.operationCommand("complete", v1alpha1.OperationCompleteCARotation, v1alpha1.RotationCompleted),
		e.abortCommand(), e.statusCommand(), e.planCommand())
	certs := &cobra.Command{
		Use:   "certs",
		Short: "Inspect a Cluster's certificates and keep a copy of its CA keys",
		Long: `Check when a Cluster's certificates and CAs expire, store an encrypted copy of its CA keys for a short time,
fetch that copy, and recreate missing CA Secrets from it.`,
		RunE: groupCommand,
	}
	certs.AddCommand(e.checkExpirationCommand(), e.uploadCommand(), e.downloadCommand(), e.restoreCommand())
	root.AddCommand(rotation, e.campaignCommand(), certs, e.kubeconfigCommand(), &cobra.Command{
		Use: "version", Short: "Print the version of kubectl carousel", Args: cobra.NoArgs,
		Long: "Print the release of kubectl carousel, the git revision it was built from, its Go version and platform.",
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "kubectl-carousel", version.Get())
		},
	})
	return root
}

// groupCommand runs a group of subcommands (rotation, certs, campaign) named
// alone: it prints the group's help. An argument is a subcommand the group
// does not have, which cobra only refuses at the root; a mistyped one
// (`rotation cmplete`) must fail, as kubectl's own groups do, not print the
// help and succeed.
func groupCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	cmd.SuggestionsMinimumDistance = cmp.Or(cmd.SuggestionsMinimumDistance, 2) // cobra's default at the root
	if suggestions := cmd.SuggestionsFor(args[0]); len(suggestions) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(suggestions, "\n\t")
	}
	return fmt.Errorf("%s\nRun '%s --help' for usage", msg, cmd.CommandPath())
}

// errNoKubeconfig says what to do when nothing names the management cluster,
// instead of the refused connection to localhost:8080 that client-go's
// empty default would end in.
var errNoKubeconfig = errors.New("no kubeconfig: kubectl carousel talks to the management cluster, where the Clusters are; " +
	"point KUBECONFIG or --kubeconfig at it, or give --server")

// config is the management cluster's REST config and the namespace of the kubectl flags.
func (e *env) config() (*rest.Config, string, error) {
	if raw, err := e.flags.ToRawKubeConfigLoader().RawConfig(); err == nil && len(raw.Clusters) == 0 &&
		(e.flags.APIServer == nil || *e.flags.APIServer == "") && os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return nil, "", errNoKubeconfig
	}
	cfg, err := e.flags.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	// The API server's warnings (the admission webhook's recommendation,
	// say) go to stderr, as kubectl prints them; controller-runtime's
	// client would otherwise log them to a logger the plugin does not set.
	cfg.WarningHandler = rest.NewWarningWriter(e.streams.ErrOut, rest.WarningWriterOptions{Deduplicate: true})
	if e.ctx != nil {
		cancelledWith(e.ctx, cfg)
	}
	if e.server != nil {
		e.server.watch(cfg)
	}
	ns, _, err := e.flags.ToRawKubeConfigLoader().Namespace()
	return cfg, ns, err
}

func (e *env) client() (client.Client, string, error) {
	cfg, ns, err := e.config()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	return c, ns, err
}

// completeClusters completes a command's CLUSTER argument with the names of the Clusters in the namespace of
// the kubectl flags; no completion when it cannot list them.
func (e *env) completeClusters(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, ns, err := e.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var list v1alpha1.ClusterList
	if err := c.List(cmd.Context(), &list, client.InNamespace(ns)); err != nil {
		cobra.CompDebugln("listing Clusters: "+err.Error(), true)
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []cobra.Completion
	for _, cl := range list.Items {
		if strings.HasPrefix(cl.Name, toComplete) {
			names = append(names, cl.Name)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// oneCluster accepts exactly one argument, the Cluster's name, and otherwise
// says how to call the command.
var oneCluster = oneNamed("Cluster")

// oneNamed accepts exactly one argument, the name of an object of kind, and
// otherwise says how to call the command.
func oneNamed(kind string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 1 {
			return nil
		}
		return fmt.Errorf("%s takes the name of one %s, got %d argument(s): %s", cmd.CommandPath(), kind, len(args), cmd.UseLine())
	}
}

// clusterArg connects to the management cluster and reads the Cluster the
// command names, in the namespace of the kubectl flags.
func (e *env) clusterArg(ctx context.Context, name string) (client.Client, *v1alpha1.Cluster, error) {
	c, ns, err := e.client()
	if err != nil {
		return nil, nil, err
	}
	cl, err := e.cluster(ctx, c, ns, name)
	return c, cl, err
}

func (e *env) cluster(ctx context.Context, c client.Client, ns, name string) (*v1alpha1.Cluster, error) {
	cl := &v1alpha1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cl); err != nil {
		return nil, err
	}
	return cl, nil
}

// secretsOf lists the Cluster's Secrets by name.
func secretsOf(ctx context.Context, c client.Client, cl *v1alpha1.Cluster) (map[string]*corev1.Secret, error) {
	var list corev1.SecretList
	if err := c.List(ctx, &list, client.InNamespace(cl.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: cl.Name}); err != nil {
		return nil, err
	}
	out := map[string]*corev1.Secret{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}
