package plugin

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// operationCommand is `rotation start` or `rotation complete`: it sets the
// operation annotation (the admission webhook says when it is not allowed)
// and, with --wait, follows the phases until the target one.
func (e *env) operationCommand(use, operation string, target v1alpha1.CARotationPhase) *cobra.Command {
	var (
		wait, inWindow bool
		timeout        time.Duration
	)
	cmd := &cobra.Command{
		Use:   use + " CLUSTER",
		Short: fmt.Sprintf("Annotate CLUSTER with %s=%s (or, with --in-maintenance-window, %s)", v1alpha1.OperationAnnotation, operation, v1alpha1.MaintenanceOperationAnnotation),
		Args:  oneCluster,
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
			annotation, done := v1alpha1.OperationAnnotation, "requested"
			if inWindow {
				annotation, done = v1alpha1.MaintenanceOperationAnnotation, "queued for the maintenance window"
			}
			cl.Annotations[annotation] = operation
			if err := c.Patch(ctx, cl, patch); err != nil {
				return err
			}
			fmt.Fprintf(e.streams.Out, "cluster %s/%s: %s %s\n", cl.Namespace, args[0], operation, done)
			if !wait {
				return nil
			}
			return e.follow(ctx, c, cl.Namespace, args[0], target, timeout)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "Follow the rotation, printing each phase change, until it is "+string(target))
	cmd.Flags().BoolVar(&inWindow, "in-maintenance-window", false, "Queue the operation for the Cluster's maintenance time window (spec.maintenance.timeWindow) instead of requesting it now")
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
		if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ConditionMaintenanceOperationQueued); cond != nil && cond.Status == metav1.ConditionTrue {
			line += ": " + cond.Message
		}
		_, annotated := cl.Annotations[v1alpha1.OperationAnnotation]
		_, queued := cl.Annotations[v1alpha1.MaintenanceOperationAnnotation]
		annotated = annotated || queued
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
		Args:  oneCluster,
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

// when formats an optional timestamp, or "-".
func when(t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// writeStatus prints where a Cluster's CA rotation stands.
func writeStatus(w io.Writer, cl *v1alpha1.Cluster) {
	rot := cl.CARotation()
	if rot == nil {
		rot = &v1alpha1.CARotation{}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Cluster:\t%s/%s\n", cl.Namespace, cl.Name)
	fmt.Fprintf(tw, "Phase:\t%s\n", rotation.PhaseName(rot.Phase))
	if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ConditionCARotation); cond != nil && cond.Status == "True" {
		fmt.Fprintf(tw, "Waiting for:\t%s\n", cond.Message)
	}
	if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ConditionMaintenanceOperationQueued); cond != nil && cond.Status == metav1.ConditionTrue {
		fmt.Fprintf(tw, "Queued:\t%s\n", cond.Message)
	}
	if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ConditionCARotationRecommended); cond != nil && cond.Status == metav1.ConditionTrue {
		fmt.Fprintf(tw, "Recommended:\t%s\n", cond.Message)
	}
	fmt.Fprintf(tw, "Last initiation:\t%s\n", when(rot.LastInitiationTime))
	fmt.Fprintf(tw, "Last initiation finished:\t%s\n", when(rot.LastInitiationFinishedTime))
	fmt.Fprintf(tw, "Last completion triggered:\t%s\n", when(rot.LastCompletionTriggeredTime))
	fmt.Fprintf(tw, "Last completion:\t%s\n", when(rot.LastCompletionTime))
	var pending []string
	for _, p := range rot.PendingWorkersRollouts {
		pending = append(pending, p.Name)
	}
	if len(pending) == 0 {
		pending = []string{"none"}
	}
	fmt.Fprintf(tw, "Pending worker rollouts:\t%s\n", strings.Join(pending, ", "))
	_ = tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tCURRENT FINGERPRINT\tCURRENT NOT AFTER\tPREVIOUS FINGERPRINT\tPREVIOUS NOT AFTER")
	if cl.Status.Credentials != nil {
		for _, inv := range cl.Status.Credentials.CertificateAuthorities {
			cur, curAfter, prev, prevAfter := "-", "-", "-", "-"
			if inv.Current != nil {
				cur, curAfter = short(inv.Current.Fingerprint), inv.Current.NotAfter.UTC().Format(time.RFC3339)
			}
			if inv.Previous != nil {
				prev, prevAfter = short(inv.Previous.Fingerprint), inv.Previous.NotAfter.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", inv.Role, cur, curAfter, prev, prevAfter)
		}
	}
	_ = tw.Flush()

	// The conditions, as the recovery guide reads them.
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONDITION\tSTATUS\tREASON\tSINCE\tMESSAGE")
	for _, cond := range cl.Status.Conditions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cond.Type, cond.Status, cond.Reason, cond.LastTransitionTime.UTC().Format(time.RFC3339), cond.Message)
	}
	_ = tw.Flush()
}
