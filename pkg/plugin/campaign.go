package plugin

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// campaignCommand is `campaign`: rotations of many Clusters in waves.
func (e *env) campaignCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "campaign",
		Short: "Rotate the CAs of many Clusters in waves with a RotationCampaign",
		Long: `A RotationCampaign rotates the CAs of the Clusters a label selector picks, a few at a time: "start" creates it
and starts phase 1 on at most --max-concurrent Clusters at once, the next ones as those become Prepared; once
every Cluster is Prepared and your clients trust the new CAs, "complete" moves it to phase 2, which completes
each Cluster the same way. More failed Clusters than --max-failures halt it; "pause" and "resume" stop and
restart it by hand. Each Cluster's own webhook still judges every operation the campaign requests.`,
		RunE: groupCommand,
	}
	cmd.AddCommand(e.campaignStartCommand(), e.campaignCompleteCommand(),
		e.campaignPauseCommand("pause", true), e.campaignPauseCommand("resume", false), e.campaignStatusCommand())
	return cmd
}

// oneCampaign accepts exactly one argument, the campaign's name.
var oneCampaign = oneNamed("RotationCampaign")

// campaignWait is --wait and --timeout of start and complete.
type campaignWait struct {
	wait    bool
	timeout time.Duration
}

func addCampaignWaitFlags(cmd *cobra.Command, until v1alpha1.CampaignPhase) *campaignWait {
	w := &campaignWait{}
	cmd.Flags().BoolVar(&w.wait, "wait", false, fmt.Sprintf("Follow the campaign, printing its progress, until it is %s, halted, or held with nothing to wait for", until))
	cmd.Flags().DurationVar(&w.timeout, "timeout", 6*time.Hour, "How long --wait waits")
	refuseTimeoutsNotPositive(cmd, &w.wait, &w.timeout)
	return w
}

func (e *env) campaignStartCommand() *cobra.Command {
	var selector, maxConcurrent, maxFailures string
	var deadline time.Duration
	var paused bool
	cmd := &cobra.Command{
		Use:   "start CAMPAIGN --selector KEY=VALUE[,...]",
		Short: "Create a RotationCampaign that starts the CA rotation of the selected Clusters in waves",
		Long: `Create the RotationCampaign CAMPAIGN at the Start step: it requests start-ca-rotation on the Clusters of the
namespace that --selector picks, at most --max-concurrent at a time, until every one is Prepared.`,
		Example: `  # Prepare every Cluster labelled env=prod, five at a time, halting at the second failure
  kubectl carousel campaign start prod-2026 -n fleet -l env=prod --max-concurrent 5 --max-failures 1 --wait`,
		Args: oneCampaign,
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "Label selector of the Clusters to rotate (required), as kubectl get -l takes it")
	cmd.Flags().StringVar(&maxConcurrent, "max-concurrent", "1", "How many Clusters rotate at once: a number, or a percentage of the selected Clusters")
	cmd.Flags().StringVar(&maxFailures, "max-failures", "0", "How many Clusters may fail before the campaign halts: a number, or a percentage")
	cmd.Flags().DurationVar(&deadline, "progress-deadline", v1alpha1.DefaultCampaignProgressDeadline, "How long a Cluster's phase may take before it counts as failed")
	cmd.Flags().BoolVar(&paused, "paused", false, "Create the campaign paused: it starts no Cluster until resumed")
	w := addCampaignWaitFlags(cmd, v1alpha1.CampaignPrepared)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if selector == "" {
			return fmt.Errorf("--selector is required: name the Clusters to rotate by label, e.g. -l env=prod")
		}
		sel, err := metav1.ParseToLabelSelector(selector)
		if err != nil {
			return fmt.Errorf("--selector %q: %w", selector, err)
		}
		c, ns, err := e.client()
		if err != nil {
			return err
		}
		rc := &v1alpha1.RotationCampaign{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: args[0]},
			Spec: v1alpha1.RotationCampaignSpec{Selector: *sel, Step: v1alpha1.CampaignStart, Paused: paused,
				MaxConcurrent: ptr.To(intstr.Parse(maxConcurrent)), MaxFailures: ptr.To(intstr.Parse(maxFailures)),
				ProgressDeadline: &metav1.Duration{Duration: deadline}},
		}
		if err := c.Create(cmd.Context(), rc); err != nil {
			return err
		}
		fmt.Fprintf(e.streams.Out, "rotationcampaign %s/%s created: start-ca-rotation on the Clusters selected by %s\n", ns, rc.Name, selector)
		if !w.wait {
			return nil
		}
		return e.followCampaign(cmd.Context(), c, client.ObjectKeyFromObject(rc), v1alpha1.CampaignPrepared, w.timeout)
	}
	return cmd
}

func (e *env) campaignCompleteCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "complete CAMPAIGN",
		Short: "Move a RotationCampaign to its Complete step: complete the rotation of its Clusters in waves",
		Long: `Set spec.step of CAMPAIGN to Complete: it requests complete-ca-rotation on each selected Cluster once it is
Prepared, at most maxConcurrent at a time, until every one is Completed. A campaign does not go back to Start.`,
		Example: `  # Once every Cluster of the campaign is Prepared and your clients trust the new CAs
  kubectl carousel campaign complete prod-2026 -n fleet --wait`,
		Args: oneCampaign,
	}
	w := addCampaignWaitFlags(cmd, v1alpha1.CampaignCompleted)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, key, err := e.patchCampaign(cmd.Context(), args[0], func(rc *v1alpha1.RotationCampaign) { rc.Spec.Step = v1alpha1.CampaignComplete })
		if err != nil {
			return err
		}
		fmt.Fprintf(e.streams.Out, "rotationcampaign %s: step Complete\n", key)
		if !w.wait {
			return nil
		}
		return e.followCampaign(cmd.Context(), c, key, v1alpha1.CampaignCompleted, w.timeout)
	}
	return cmd
}

func (e *env) campaignPauseCommand(use string, paused bool) *cobra.Command {
	short := "Pause a RotationCampaign: it starts no further Cluster; those rotating go on"
	long := `Set spec.paused of CAMPAIGN: it requests its step's operation on no further Cluster. The Clusters already
rotating go on to the step's phase; "resume" lets the campaign start the others again.`
	if !paused {
		short = "Resume a paused RotationCampaign"
		long = `Clear spec.paused of CAMPAIGN: it goes on starting its step's operation on the Clusters left, within its
budgets.`
	}
	return &cobra.Command{
		Use: use + " CAMPAIGN", Short: short, Long: long, Args: oneCampaign,
		Example: fmt.Sprintf("  kubectl carousel campaign %s prod-2026 -n fleet", use),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, key, err := e.patchCampaign(cmd.Context(), args[0], func(rc *v1alpha1.RotationCampaign) { rc.Spec.Paused = paused })
			if err == nil {
				fmt.Fprintf(e.streams.Out, "rotationcampaign %s: paused=%t\n", key, paused)
			}
			return err
		},
	}
}

// patchCampaign changes the campaign name with mutate (patchCampaignWith).
func (e *env) patchCampaign(ctx context.Context, name string, mutate func(*v1alpha1.RotationCampaign)) (client.Client, client.ObjectKey, error) {
	c, ns, err := e.client()
	if err != nil {
		return nil, client.ObjectKey{}, err
	}
	key := client.ObjectKey{Namespace: ns, Name: name}
	return c, key, patchCampaignWith(ctx, c, key, mutate)
}

// patchCampaignWith reads the campaign key, changes it with mutate and patches
// what changed (the webhook refuses what it must). The patch carries the
// resourceVersion read, and a conflict reads again: a patch is the difference
// from what was read, so one made on a stale read (paused there already, and
// resumed since) would otherwise leave out the change asked for.
func patchCampaignWith(ctx context.Context, c client.Client, key client.ObjectKey, mutate func(*v1alpha1.RotationCampaign)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rc := &v1alpha1.RotationCampaign{}
		if err := c.Get(ctx, key, rc); err != nil {
			return err
		}
		patch := client.MergeFromWithOptions(rc.DeepCopy(), client.MergeFromWithOptimisticLock{})
		mutate(rc)
		return c.Patch(ctx, rc, patch)
	})
}

func (e *env) campaignStatusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status CAMPAIGN",
		Short: "Show a RotationCampaign's step, phase, counts, stage times and the Clusters that block it",
		Long: `Show where CAMPAIGN stands: its step and phase, how many selected Clusters are pending, waiting, rotating,
done, skipped and failed, how many are in each rotation phase, when each stage began and ended, and the
Clusters that hold it up, with why.

-o json or -o yaml prints the RotationCampaign object itself.`,
		Example: `  kubectl carousel campaign status prod-2026 -n fleet

  # The Clusters that failed, for a script
  kubectl carousel campaign status prod-2026 -n fleet -o json | jq -r '.status.blocking[] | select(.state == "Failed") | .name'`,
		Args: oneCampaign,
	}
	out := addOutputFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, ns, err := e.client()
		if err != nil {
			return err
		}
		rc := &v1alpha1.RotationCampaign{}
		if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, rc); err != nil {
			return err
		}
		if out.printer != nil {
			return out.printer.PrintObj(rc, e.streams.Out)
		}
		writeCampaignStatus(e.streams.Out, rc)
		return nil
	}
	return cmd
}

// writeCampaignStatus prints where a campaign stands.
func writeCampaignStatus(w io.Writer, rc *v1alpha1.RotationCampaign) {
	st := rc.Status
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "RotationCampaign:\t%s/%s\n", rc.Namespace, rc.Name)
	fmt.Fprintf(tw, "Selector:\t%s\n", metav1.FormatLabelSelector(&rc.Spec.Selector))
	fmt.Fprintf(tw, "Step:\t%s\n", rc.Spec.StepOrDefault())
	fmt.Fprintf(tw, "Phase:\t%s\n", orDash(string(st.Phase)))
	if cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionCampaignProgressing); cond != nil {
		fmt.Fprintf(tw, "Progress:\t%s\n", oneLine(cond.Message))
	}
	n := st.Clusters
	fmt.Fprintf(tw, "Clusters:\t%d selected: %d pending, %d waiting, %d in progress, %d done, %d skipped, %d failed\n",
		n.Selected, n.Pending, n.Waiting, n.InProgress, n.Done, n.Skipped, n.Failed)
	phases := make([]string, 0, len(st.RotationPhases))
	for _, p := range st.RotationPhases {
		phases = append(phases, fmt.Sprintf("%s %d", p.Phase, p.Count))
	}
	fmt.Fprintf(tw, "Rotation phases:\t%s\n", orDash(strings.Join(phases, ", ")))
	fmt.Fprintf(tw, "Started:\t%s\n", when(st.StartTime))
	fmt.Fprintf(tw, "Prepared:\t%s\n", when(st.PreparedTime))
	fmt.Fprintf(tw, "Complete step:\t%s\n", when(st.CompleteStepTime))
	fmt.Fprintf(tw, "Completed:\t%s\n", when(st.CompletedTime))
	_ = tw.Flush()
	if len(st.Blocking) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tSTATE\tWHY")
	for _, b := range st.Blocking {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", b.Name, b.State, oneLine(b.Message))
	}
	_ = tw.Flush()
	if more := n.Failed + n.InProgress + n.Waiting - int32(len(st.Blocking)); more > 0 {
		fmt.Fprintf(w, "(%d more; kubectl get clusters.carousel.dev -n %s -l '%s')\n", more, rc.Namespace, metav1.FormatLabelSelector(&rc.Spec.Selector))
	}
}

// followCampaign prints the campaign's progress whenever it changes, until
// it is in phase target, halted, or held with nothing to wait for (no
// Cluster selected, only failed ones left, or a spec the webhook did not
// refuse but the controller does: each lasts until someone acts,
// or a failed Cluster recovers). A read that fails for a while (an
// API server restarting, a connection reset) is reported and tried again;
// one that says the campaign is gone, or may not be read, ends the wait.
func (e *env) followCampaign(ctx context.Context, c client.Client, key client.ObjectKey, target v1alpha1.CampaignPhase, timeout time.Duration) error {
	var last, lastErr, reason string
	var phase v1alpha1.CampaignPhase
	heldBy := map[string]string{
		v1alpha1.ReasonCampaignNoClusterSelected:  "its selector picks no Cluster",
		v1alpha1.ReasonCampaignFailedClustersLeft: "only failed Clusters within maxFailures are left",
		v1alpha1.ReasonCampaignInvalidSpec:        "its spec is refused; it starts nothing until the spec is mended",
	}
	stuck := func() bool { return heldBy[reason] != "" }
	err := wait.PollUntilContextTimeout(ctx, cmp.Or(e.campaignPoll, 2*time.Second), timeout, true, func(ctx context.Context) (bool, error) {
		rc := &v1alpha1.RotationCampaign{}
		if err := c.Get(ctx, key, rc); err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
				return false, err
			}
			if err.Error() != lastErr {
				fmt.Fprintf(e.streams.ErrOut, "reading rotationcampaign %s: %v (trying again)\n", key, err)
				lastErr = err.Error()
			}
			return false, nil
		}
		lastErr = ""
		phase = rc.Status.Phase
		line := string(phase)
		reason = ""
		if cond := meta.FindStatusCondition(rc.Status.Conditions, v1alpha1.ConditionCampaignProgressing); cond != nil && cond.ObservedGeneration == rc.Generation {
			line += ": " + cond.Message
			reason = cond.Reason
		} else {
			line = "" // not looked at since the last change
		}
		if line != "" && line != last {
			fmt.Fprintln(e.streams.Out, line)
			last = line
		}
		return line != "" && (phase == target || phase == v1alpha1.CampaignHalted || stuck()), nil
	})
	switch {
	case wait.Interrupted(err) && ctx.Err() == nil:
		return fmt.Errorf("rotationcampaign %s is not %s after %s (%s)", key, target, timeout, last)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("rotationcampaign %s was deleted", key)
	case err == nil && phase == v1alpha1.CampaignHalted:
		return fmt.Errorf("rotationcampaign %s halted: kubectl carousel campaign status %s -n %s", key, key.Name, key.Namespace)
	case err == nil && phase != target && stuck():
		return fmt.Errorf("rotationcampaign %s is held (%s: %s): kubectl carousel campaign status %s -n %s", key, reason, heldBy[reason], key.Name, key.Namespace)
	}
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
