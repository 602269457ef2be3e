package plugin

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// planCommand is `rotation plan`: what each phase will issue, re-sign and
// roll, and which nodes, without changing anything.
func (e *env) planCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "plan CLUSTER",
		Short: "Show what each phase of a CA rotation will issue, re-sign and roll, without changing anything",
		Args:  oneCluster,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, cl, err := e.clusterArg(ctx, args[0])
			if err != nil {
				return err
			}
			consumers, err := consumerNames(ctx, c, cl)
			if err != nil {
				return err
			}
			writePlan(e.streams.Out, cl, consumers, e.poolNodes(ctx, c, cl))
			return nil
		},
	}
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

// poolNodes lists the nodes of each pool through the admin credential, or
// says why it cannot. The admin Secret and the bundle live in a namespace a
// tenant may write, so the client is built from their data only
// (credentials.RESTConfig): the Secret's kubeconfig, which could name an exec
// plugin or files on this machine, is never loaded.
func (e *env) poolNodes(ctx context.Context, c client.Client, cl *v1alpha1.Cluster) map[string]string {
	out := map[string]string{}
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
			cs, err = kubernetes.NewForConfig(restCfg)
		} else {
			err = cfgErr
		}
	}
	for _, pool := range cl.Spec.Workers {
		switch {
		case cs == nil && err != nil:
			out[pool.Name] = "nodes unknown: " + err.Error()
		case cs == nil:
			out[pool.Name] = "nodes unknown: the Cluster has no endpoint"
		default:
			nodes, listErr := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelPool + "=" + pool.Name})
			if listErr != nil {
				out[pool.Name] = "nodes unknown: " + listErr.Error()
				continue
			}
			var names []string
			for _, n := range nodes.Items {
				names = append(names, n.Name)
			}
			out[pool.Name] = fmt.Sprintf("%d node(s): %s", len(names), strings.Join(names, ", "))
		}
	}
	return out
}

func writePlan(w io.Writer, cl *v1alpha1.Cluster, consumers []string, nodes map[string]string) {
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
	if len(consumers) == 0 {
		consumers = []string{"none labelled " + v1alpha1.LabelCluster + "=" + cl.Name}
	}
	lists := map[rotation.List][]string{
		rotation.ListCARoles: roles, rotation.ListConsumers: consumers,
		rotation.ListClientCertificates: clients, rotation.ListServerCertificates: servers,
	}
	fmt.Fprintf(w, "Cluster %s/%s, now in phase %s.\n", cl.Namespace, cl.Name, rotation.PhaseName(cl.CARotationPhase()))
	for i, phase := range rotation.Plan() {
		fmt.Fprintf(w, "\nPhase %d: %s -> %s -> %s\n", i+1, phase.Operation, phase.Through, phase.Done)
		for _, line := range phase.Lines {
			switch line.List {
			case rotation.ListNone:
				fmt.Fprintf(w, "  %s\n", line.Format)
			case rotation.ListWorkerPools:
				fmt.Fprintf(w, "  %s\n", line.Format)
				writePools(w, cl.Spec.Workers, nodes)
			default:
				fmt.Fprintf(w, "  "+line.Format+"\n", strings.Join(lists[line.List], ", "))
			}
		}
		if phase.Then != "" {
			fmt.Fprintf(w, "  then: %s\n", phase.Then)
		}
	}
}

func writePools(w io.Writer, pools []v1alpha1.WorkerPool, nodes map[string]string) {
	if len(pools) == 0 {
		fmt.Fprintln(w, "    none")
	}
	for _, p := range pools {
		fmt.Fprintf(w, "    %s (%s): %s\n", p.Name, p.RolloutStrategy, nodes[p.Name])
	}
}
