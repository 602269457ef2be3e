package plugin

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// Bounds of `kubeconfig --ttl`.
const (
	minKubeconfigTTL = 10 * time.Minute
	maxKubeconfigTTL = 24 * time.Hour
)

// kubeconfigCommand prints a short-lived admin kubeconfig of a managed
// cluster: a fresh key and a certificate (O=system:masters) signed locally by
// the client CA the API server trusts now, with the current trust bundle.
func (e *env) kubeconfigCommand() *cobra.Command {
	var (
		ttl  time.Duration
		name string
	)
	cmd := &cobra.Command{
		Use:   "kubeconfig CLUSTER",
		Short: "Print a short-lived admin kubeconfig of CLUSTER's API server",
		Long: `Print a kubeconfig for CLUSTER's API server (spec.controlPlane.endpoint) with a fresh key and a certificate of
the group system:masters, valid for --ttl, signed on this machine by the client CA the API server trusts at
this point of a rotation, and the cluster CA bundle of now. Nothing is stored: the key exists only in the
printed kubeconfig. The user name carousel:admin:<--name> shows in the API server's audit log.`,
		Example: `  # Half an hour of admin access to prod's API server
  kubectl carousel kubeconfig prod -n team-a --ttl 30m --name alice > prod.kubeconfig
  kubectl --kubeconfig prod.kubeconfig get nodes`,
		Args:              oneCluster,
		ValidArgsFunction: e.completeClusters,
		RunE: func(cmd *cobra.Command, args []string) error {
			if ttl < minKubeconfigTTL || ttl > maxKubeconfigTTL {
				return fmt.Errorf("--ttl must be between %s and %s", minKubeconfigTTL, maxKubeconfigTTL)
			}
			ctx := cmd.Context()
			c, cl, err := e.clusterArg(ctx, args[0])
			if err != nil {
				return err
			}
			if cl.Spec.ControlPlane.Endpoint == "" {
				return errors.New("the Cluster has no spec.controlPlane.endpoint to point a kubeconfig at")
			}
			get := func(name string, obj client.Object) error {
				return c.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: name}, obj)
			}
			bundle := &corev1.ConfigMap{}
			if err := get(credentials.BundleConfigMapName(cl.Name, v1alpha1.CARoleCluster), bundle); err != nil {
				return err
			}
			// Signed with the client CA the API server trusts at this point of a rotation.
			_, clientCA, err := credentials.ClientCAInUse(ctx, c, cl)
			if err != nil {
				return err
			}
			user := "carousel:admin:" + name
			kp, err := clientCA.IssueKeyPair(pki.LeafTemplate{
				CommonName: user, Organization: []string{"system:masters"},
				Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: ttl,
			}, pki.KeyAlgorithm(cl.Spec.Certificates.KeyAlgorithmOrDefault()), e.clock.Now())
			if err != nil {
				return err
			}
			keyPEM, err := kp.KeyPEM()
			if err != nil {
				return err
			}
			kubeconfig, err := credentials.Kubeconfig(cl.Name, cl.Spec.ControlPlane.Endpoint, []byte(bundle.Data[v1alpha1.DataKeyCABundle]), kp.CertPEM(), keyPEM, user)
			if err != nil {
				return err
			}
			_, err = e.streams.Out.Write(kubeconfig)
			return err
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, fmt.Sprintf("Validity of the credential, between %s and %s", minKubeconfigTTL, maxKubeconfigTTL))
	cmd.Flags().StringVar(&name, "name", "kubectl-carousel", "Put into the user name, carousel:admin:<name>, for the audit log")
	return cmd
}
