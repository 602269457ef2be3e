package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	outputv1alpha1 "github.com/carousel-dev/carousel/apis/output/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bounded"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// planCommand is `rotation plan`: what each phase will issue, re-sign and
// roll, and which nodes, without changing anything.
func (e *env) planCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan CLUSTER",
		Short: "Show what each phase of a CA rotation will issue, re-sign and roll, without changing anything",
		Long: `Show what each of the two phases of a CA rotation of CLUSTER will do, in order: the CAs it generates, the
certificates it re-issues in each phase, the workloads labelled with CLUSTER's name that it rolls, and the
worker pools it rolls with the nodes in each (read from the managed cluster with CLUSTER's admin certificate;
when that fails the plan says why), and the nodes in no pool, which no phase rolls. Nothing is changed.`,
		Example: `  # What will a rotation of prod do?
  kubectl carousel rotation plan prod -n team-a

  # The client certificates re-issued in the first phase
  kubectl carousel rotation plan prod -n team-a -o json | jq -r '.phases[0].steps[] | select(.list == "clientCertificates") | .items[]'`,
		Args:              oneCluster,
		ValidArgsFunction: e.completeClusters,
	}
	out := addOutputFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		c, cl, err := e.clusterArg(ctx, args[0])
		if err != nil {
			return err
		}
		consumers, err := consumerNames(ctx, c, cl)
		if err != nil {
			return err
		}
		pools, outside, unknown := e.poolNodes(ctx, c, cl)
		plan := rotationPlan(cl, consumers, pools)
		plan.NodesOutsidePools, plan.NodesUnknown = outside, unknown
		if out.printer != nil {
			return out.printer.PrintObj(plan, e.streams.Out)
		}
		writePlan(e.streams.Out, plan)
		return nil
	}
	return cmd
}

func consumerNames(ctx context.Context, c client.Client, cl *v1alpha1.Cluster) ([]string, error) {
	opts := []client.ListOption{client.InNamespace(cl.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: cl.Name}}
	var deployments appsv1.DeploymentList
	var sets appsv1.StatefulSetList
	if err := c.List(ctx, &deployments, opts...); err != nil {
		return nil, err
	}
	if err := c.List(ctx, &sets, opts...); err != nil {
		return nil, err
	}
	var out []string
	for _, d := range deployments.Items {
		out = append(out, "Deployment/"+d.Name)
	}
	for _, s := range sets.Items {
		out = append(out, "StatefulSet/"+s.Name)
	}
	slices.Sort(out)
	return out, nil
}

// defaultManagedRequestTimeout bounds a request to a managed API server
// when --request-timeout does not: the Cluster's endpoint and bundle are a
// tenant's to write, and a server that takes the connection and never
// answers would hold the command for ever.
const defaultManagedRequestTimeout = 10 * time.Second

// managedRequestTimeout is --request-timeout, or else
// defaultManagedRequestTimeout.
func (e *env) managedRequestTimeout() time.Duration {
	if e.flags != nil {
		if cfg, err := e.flags.ToRESTConfig(); err == nil && cfg.Timeout > 0 {
			return cfg.Timeout
		}
	}
	return defaultManagedRequestTimeout
}

// planListPages is how many request timeouts a plan's list of the managed
// cluster's nodes may take in all: ten pages of 500 Nodes, a cluster of
// 5,000, as fast as their answers take one each.
const planListPages = 10

// poolNodes lists the nodes of each pool through the admin credential, and
// the nodes in no pool, or says why it cannot (unknown). The admin Secret and the bundle live in a namespace a
// tenant may write, so the client is built from their data only
// (credentials.RESTConfig): the Secret's kubeconfig, which could name an exec
// plugin or files on this machine, is never loaded.
func (e *env) poolNodes(ctx context.Context, c client.Client, cl *v1alpha1.Cluster) (pools map[string]outputv1alpha1.WorkerPoolPlan, outside []string, unknown string) {
	out := map[string]outputv1alpha1.WorkerPoolPlan{}
	s, bundle := &corev1.Secret{}, &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: credentials.CertificateSecretName(cl.Name, credentials.CertAdmin)}, s)
	if err == nil {
		err = c.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: credentials.BundleConfigMapName(cl.Name, v1alpha1.CARoleCluster)}, bundle)
	}
	var cs kubernetes.Interface
	if err == nil && cl.Spec.ControlPlane.Endpoint != "" {
		restCfg, cfgErr := credentials.RESTConfig(cl.Spec.ControlPlane.Endpoint, []byte(bundle.Data[v1alpha1.DataKeyCABundle]),
			s.Data[v1alpha1.DataKeyCertificate], s.Data[v1alpha1.DataKeyPrivateKey])
		if cfgErr == nil {
			restCfg.Timeout = e.managedRequestTimeout()
			restCfg.Wrap(bounded.Responses) // the endpoint is the tenant's to write
			cs, err = kubernetes.NewForConfig(restCfg)
		} else {
			err = cfgErr
		}
	}
	byPool := map[string][]string{}
	switch {
	case cs == nil && err == nil:
		err = errors.New("the Cluster has no endpoint")
	case cs != nil:
		// In pages, as kubectl lists: a page of 500 Nodes stays well within
		// an answer's bound where all of a large cluster's would not. The
		// list as a whole has a deadline too: a server that answers each
		// page just within the request timeout would hold the plan for
		// every page bounded.EachItem allows.
		listCtx, cancel := context.WithTimeout(ctx, planListPages*e.managedRequestTimeout())
		defer cancel()
		err = bounded.EachItem(listCtx, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().Nodes().List(ctx, opts)
		}, func(n *corev1.Node) {
			pool := n.Labels[v1alpha1.LabelPool]
			if cl.Spec.WorkerPool(pool) == nil {
				outside = append(outside, oneLine(n.Name))
				return
			}
			byPool[pool] = append(byPool[pool], oneLine(n.Name))
		})
		if err != nil {
			// A list cut short is not a list of the nodes.
			byPool, outside = map[string][]string{}, nil
		}
	}
	for _, pool := range cl.Spec.Workers {
		plan := outputv1alpha1.WorkerPoolPlan{Name: pool.Name, RolloutStrategy: string(pool.RolloutStrategy), MachineDeployment: pool.MachineDeployment,
			Nodes: byPool[pool.Name]}
		if err != nil {
			plan.NodesUnknown = oneLine(err.Error())
		}
		out[pool.Name] = plan
	}
	if err != nil {
		unknown = oneLine(err.Error())
	}
	return out, outside, unknown
}

// rotationPlan is rotation.Plan with the Cluster's lists filled in.
func rotationPlan(cl *v1alpha1.Cluster, consumers []string, pools map[string]outputv1alpha1.WorkerPoolPlan) *outputv1alpha1.RotationPlan {
	var clients, servers []string
	for _, cert := range credentials.Certificates(cl) {
		if cert.RenewIn == credentials.RenewInPreparing {
			clients = append(clients, cert.Name)
		} else {
			servers = append(servers, cert.Name)
		}
	}
	var roles []string
	for _, r := range v1alpha1.CARoles() {
		roles = append(roles, string(r))
	}
	lists := map[rotation.List]struct {
		name  string
		items []string
	}{
		rotation.ListCARoles: {"caRoles", roles}, rotation.ListConsumers: {"workloads", consumers},
		rotation.ListClientCertificates: {"clientCertificates", clients}, rotation.ListServerCertificates: {"serverCertificates", servers},
		rotation.ListWorkerPools: {name: "workerPools"},
	}
	plan := &outputv1alpha1.RotationPlan{Cluster: cl.Namespace + "/" + cl.Name, Phase: rotation.PhaseName(cl.CARotationPhase())}
	for _, phase := range rotation.Plan() {
		out := outputv1alpha1.PhasePlan{Operation: phase.Operation, Through: string(phase.Through), Done: string(phase.Done), Then: phase.Then,
			InsteadOf: phase.InsteadOf}
		for _, line := range phase.Lines {
			step := outputv1alpha1.PlanStep{Description: line.Format, List: lists[line.List].name}
			switch line.List {
			case rotation.ListNone:
			case rotation.ListWorkerPools:
				for _, p := range cl.Spec.Workers {
					step.WorkerPools = append(step.WorkerPools, pools[p.Name])
				}
			default:
				step.Items = lists[line.List].items
				listed := strings.Join(step.Items, ", ")
				if line.List == rotation.ListConsumers && len(step.Items) == 0 {
					listed = "none labelled " + v1alpha1.LabelCluster + "=" + cl.Name
				}
				step.Description = fmt.Sprintf(line.Format, listed)
			}
			out.Steps = append(out.Steps, step)
		}
		plan.Phases = append(plan.Phases, out)
	}
	return plan
}

func writePlan(w io.Writer, plan *outputv1alpha1.RotationPlan) {
	fmt.Fprintf(w, "Cluster %s, now in phase %s.\n", plan.Cluster, plan.Phase)
	for i, phase := range plan.Phases {
		if phase.InsteadOf != "" {
			fmt.Fprintf(w, "\nInstead of %s: %s -> %s -> %s\n", phase.InsteadOf, phase.Operation, phase.Through, phase.Done)
		} else {
			fmt.Fprintf(w, "\nPhase %d: %s -> %s -> %s\n", i+1, phase.Operation, phase.Through, phase.Done)
		}
		for _, step := range phase.Steps {
			fmt.Fprintf(w, "  %s\n", step.Description)
			if step.List == "workerPools" {
				writePools(w, step.WorkerPools)
			}
		}
		if phase.Then != "" {
			fmt.Fprintf(w, "  then: %s\n", phase.Then)
		}
	}
	if plan.NodesUnknown != "" {
		fmt.Fprintf(w, "\nThe managed cluster's nodes are unknown (%s): those in no worker pool, which no phase rolls, hold complete-ca-rotation while online\n",
			plan.NodesUnknown)
	}
	if len(plan.NodesOutsidePools) > 0 {
		fmt.Fprintf(w, "\n%d node(s) in no worker pool, which no phase rolls and which hold complete-ca-rotation while online: %s\n"+
			"  label each %s=<pool> before the rotation starts\n", len(plan.NodesOutsidePools), strings.Join(plan.NodesOutsidePools, ", "), v1alpha1.LabelPool)
	}
}

func writePools(w io.Writer, pools []outputv1alpha1.WorkerPoolPlan) {
	if len(pools) == 0 {
		fmt.Fprintln(w, "    none")
	}
	for _, p := range pools {
		nodes := fmt.Sprintf("%d node(s): %s", len(p.Nodes), strings.Join(p.Nodes, ", "))
		if p.NodesUnknown != "" {
			nodes = "nodes unknown: " + p.NodesUnknown
		}
		how := p.RolloutStrategy
		if p.MachineDeployment != "" {
			how += ", Cluster API replaces the Machines of MachineDeployment " + p.MachineDeployment
		}
		fmt.Fprintf(w, "    %s (%s): %s\n", p.Name, how, nodes)
	}
}
