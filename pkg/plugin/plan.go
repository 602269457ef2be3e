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
)

// planCommand is `rotation plan`: what each phase will issue, re-sign and
// roll, and which nodes, without changing anything.
func (e *env) planCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "plan CLUSTER",
		Short: "Show what each phase of a CA rotation will issue, re-sign and roll, without changing anything",
		Args:  cobra.ExactArgs(1),
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
	pools := func() {
		if len(cl.Spec.Workers) == 0 {
			fmt.Fprintln(w, "    none")
		}
		for _, p := range cl.Spec.Workers {
			fmt.Fprintf(w, "    %s (%s): %s\n", p.Name, p.RolloutStrategy, nodes[p.Name])
		}
	}
	fmt.Fprintf(w, "Cluster %s/%s, now in phase %s.\n\n", cl.Namespace, cl.Name, phaseName(cl.CARotationPhase()))
	fmt.Fprintln(w, "Phase 1: start-ca-rotation -> Preparing -> Prepared")
	fmt.Fprintf(w, "  generate a new CA for: %s (the old ones stay trusted)\n", strings.Join(roles, ", "))
	fmt.Fprintln(w, "  every trust bundle: old + new CA")
	fmt.Fprintf(w, "  roll (to trust both): %s\n", strings.Join(consumers, ", "))
	fmt.Fprintf(w, "  re-issue from the new CAs: %s\n", strings.Join(clients, ", "))
	fmt.Fprintf(w, "  keep on the old CAs: %s\n", strings.Join(servers, ", "))
	fmt.Fprintf(w, "  roll again (new client certificates): %s\n", strings.Join(consumers, ", "))
	fmt.Fprintln(w, "  roll worker pools (kubelets trust both CAs, client certificates from the new client CA):")
	pools()
	fmt.Fprintln(w, "  then: hand the new bundle and kubeconfigs to your own clients")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Phase 2: complete-ca-rotation -> Finalizing -> Completed")
	fmt.Fprintf(w, "  re-issue from the new CAs: %s\n", strings.Join(servers, ", "))
	fmt.Fprintf(w, "  roll: %s\n", strings.Join(consumers, ", "))
	fmt.Fprintf(w, "  delete the old CAs (keys included); every trust bundle: new CA only\n")
	fmt.Fprintf(w, "  roll again: %s\n", strings.Join(consumers, ", "))
	fmt.Fprintln(w, "  roll worker pools again (kubelets drop the old CA):")
	pools()
}
