// Package plugin is `kubectl carousel`: start, complete and follow a CA
// rotation, show where it stands, check certificate expiration, and fetch a
// short-lived admin kubeconfig of a managed cluster. It talks to the
// management cluster with the usual kubectl flags (--kubeconfig, --context,
// -n).
package plugin

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/rotation"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// env is what every command needs: the management cluster and the streams.
type env struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	clock   clock.Clock
}

// NewCommand returns the plugin's root command.
func NewCommand(streams genericiooptions.IOStreams, clk clock.Clock) *cobra.Command {
	e := &env{flags: genericclioptions.NewConfigFlags(true), streams: streams, clock: clk}
	root := &cobra.Command{
		Use:           "kubectl-carousel",
		Short:         "Rotate and inspect the certificate authorities of Carousel Clusters",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	e.flags.AddFlags(root.PersistentFlags())

	rotation := &cobra.Command{Use: "rotation", Short: "Start, complete and follow a CA rotation"}
	rotation.AddCommand(e.operationCommand("start", v1alpha1.OperationStartCARotation, v1alpha1.RotationPrepared),
		e.operationCommand("complete", v1alpha1.OperationCompleteCARotation, v1alpha1.RotationCompleted),
		e.statusCommand(), e.planCommand())
	certs := &cobra.Command{Use: "certs", Short: "Inspect a Cluster's certificates"}
	certs.AddCommand(e.checkExpirationCommand(), e.uploadCommand(), e.downloadCommand(), e.restoreCommand())
	root.AddCommand(rotation, certs, e.kubeconfigCommand())
	return root
}

func (e *env) client() (client.Client, string, error) {
	cfg, err := e.flags.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	ns, _, err := e.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	return c, ns, err
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

// operationCommand is `rotation start` or `rotation complete`: it sets the
// operation annotation (the admission webhook says when it is not allowed)
// and, with --wait, follows the phases until the target one.
func (e *env) operationCommand(use, operation string, target v1alpha1.CARotationPhase) *cobra.Command {
	var (
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   use + " CLUSTER",
		Short: fmt.Sprintf("Annotate CLUSTER with %s=%s", v1alpha1.OperationAnnotation, operation),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, cl, err := e.clusterArg(ctx, args[0])
			if err != nil {
				return err
			}
			patch := client.MergeFrom(cl.DeepCopy())
			if cl.Annotations == nil {
				cl.Annotations = map[string]string{}
			}
			cl.Annotations[v1alpha1.OperationAnnotation] = operation
			if err := c.Patch(ctx, cl, patch); err != nil {
				return err
			}
			fmt.Fprintf(e.streams.Out, "cluster %s/%s: %s requested\n", cl.Namespace, args[0], operation)
			if !wait {
				return nil
			}
			return e.follow(ctx, c, cl.Namespace, args[0], target, timeout)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "Follow the rotation, printing each phase change, until it is "+string(target))
	cmd.Flags().DurationVar(&timeout, "timeout", time.Hour, "How long --wait waits")
	return cmd
}

// follow prints the phase and what it waits for whenever either changes,
// until the target phase.
func (e *env) follow(ctx context.Context, c client.Client, ns, name string, target v1alpha1.CARotationPhase, timeout time.Duration) error {
	deadline := e.clock.Now().Add(timeout)
	var last string
	for {
		cl, err := e.cluster(ctx, c, ns, name)
		if err != nil {
			return err
		}
		line := "phase " + rotation.PhaseName(cl.CARotationPhase())
		if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ConditionCARotation); cond != nil && cond.Status == "True" {
			line += ": " + cond.Message
		}
		_, annotated := cl.Annotations[v1alpha1.OperationAnnotation]
		if line != last {
			fmt.Fprintln(e.streams.Out, line)
			last = line
		}
		if cl.CARotationPhase() == target && !annotated {
			return nil
		}
		if !e.clock.Now().Before(deadline) {
			return fmt.Errorf("%s/%s is not %s after %s (%s)", ns, name, target, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.clock.After(time.Second):
		}
	}
}

// statusCommand is `rotation status`.
func (e *env) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status CLUSTER",
		Short: "Show the rotation phase, its timestamps, pending worker pools and the CA inventory",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, cl, err := e.clusterArg(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			writeStatus(e.streams.Out, cl)
			return nil
		},
	}
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
