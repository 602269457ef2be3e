package plugin

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/oldca"
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
		ttl        time.Duration
		name, file string
	)
	cmd := &cobra.Command{
		Use:   "kubeconfig CLUSTER",
		Short: "Print a short-lived admin kubeconfig of CLUSTER's API server",
		Long: `Print a kubeconfig for CLUSTER's API server (spec.controlPlane.endpoint) with a fresh key and a certificate of
the group system:masters, valid for --ttl, signed on this machine by the client CA the API server trusts at
this point of a rotation, and the cluster CA bundle of now. The key is not stored: it exists only in the
printed kubeconfig. The user name carousel:admin:<--name> shows in the API server's audit log.

Before printing, the certificate's user, fingerprint, issuing CA and expiry are added to the ConfigMap
<CLUSTER>-issued-kubeconfigs. The old-CA usage gate reads it: complete-ca-rotation is refused, and an abort
waits before deleting the new client CA, while a user holds an unexpired kubeconfig from the client CA that is
dropped. Running this command again with the same --name (by default <your login name>@<this machine's host
name>) moves that user to the CA of now.

With --output-file the kubeconfig is written into a new file that only you may read (mode 0600) instead of
printed. The file is created before anything is issued or recorded: an existing file, or one that cannot be
created, is refused first, and the file is removed if issuing or recording then fails.`,
		Example: `  # Half an hour of admin access to prod's API server, in a file only you may read (it holds the key)
  kubectl carousel kubeconfig prod -n team-a --ttl 30m --name alice --output-file prod.kubeconfig
  kubectl --kubeconfig prod.kubeconfig get nodes`,
		Args:              oneCluster,
		ValidArgsFunction: e.completeClusters,
		RunE: func(cmd *cobra.Command, args []string) error {
			if ttl < minKubeconfigTTL || ttl > maxKubeconfigTTL {
				return fmt.Errorf("--ttl must be between %s and %s", minKubeconfigTTL, maxKubeconfigTTL)
			}
			if err := checkKubeconfigName(name); err != nil {
				return err
			}
			var out *os.File
			if file != "" {
				f, err := createKubeconfigFile(file)
				if err != nil {
					return err
				}
				out = f
				// Removed if the kubeconfig is not issued and recorded
				// (out is cleared once the file is being filled).
				defer func() {
					if out != nil {
						_ = out.Close()
						_ = os.Remove(file)
					}
				}()
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
			}, pki.KeyAlgorithm(cl.Spec.Certificates.KeyAlgorithmOrDefault()), e.serverNow())
			if err != nil {
				return err
			}
			keyPEM, err := kp.KeyPEM()
			if err != nil {
				return err
			}
			kubeconfig, err := adminKubeconfig(cl, []byte(bundle.Data[v1alpha1.DataKeyCABundle]), kp.CertPEM(), keyPEM, user)
			if err != nil {
				return err
			}
			if err := recordKubeconfig(ctx, c, cl, oldca.IssuedCertificate{User: user, Fingerprint: pki.Fingerprint(kp.Cert),
				Issuer: hex.EncodeToString(clientCA.Cert.SubjectKeyId), IssuedAt: e.serverNow().UTC().Truncate(time.Second),
				NotAfter: kp.Cert.NotAfter.UTC()}, e.serverNow()); err != nil {
				return fmt.Errorf("the kubeconfig was not printed: recording it for the old-CA usage gate: %w", err)
			}
			if file == "" {
				_, err = e.streams.Out.Write(kubeconfig)
				return err
			}
			filled := out
			out = nil
			if err := fillNewFile(filled, kubeconfig); err != nil {
				return fmt.Errorf("--output-file: %w", err)
			}
			_, err = fmt.Fprintf(e.streams.Out, "wrote %s (mode 0600), valid until %s\n", file, kp.Cert.NotAfter.UTC().Format(time.RFC3339))
			return err
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, fmt.Sprintf("Validity of the credential, between %s and %s", minKubeconfigTTL, maxKubeconfigTTL))
	cmd.Flags().StringVar(&file, "output-file", "", "Write the kubeconfig into this new file (mode 0600) instead of printing it")
	cmd.Flags().StringVar(&name, "name", defaultKubeconfigName(), "Put into the user name, carousel:admin:<name>, for the audit log and the record of issued kubeconfigs")
	return cmd
}

// adminKubeconfig is the kubeconfig of user for cl's API server, checked as
// the operator checks the connections it makes itself
// (credentials.RESTConfig): an endpoint it would refuse, or a cluster bundle
// that does not parse (edited by hand, say), hands out nothing, where a
// kubeconfig without a bundle would trust the workstation's roots.
func adminKubeconfig(cl *v1alpha1.Cluster, caBundle, certPEM, keyPEM []byte, user string) ([]byte, error) {
	if _, err := credentials.RESTConfig(cl.Spec.ControlPlane.Endpoint, caBundle, certPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("no kubeconfig for cluster %s/%s: %w", cl.Namespace, cl.Name, err)
	}
	return credentials.Kubeconfig(cl.Name, cl.Spec.ControlPlane.Endpoint, caBundle, certPEM, keyPEM, user)
}

// createKubeconfigFile creates file for --output-file, only new and with
// mode 0600, before the kubeconfig is issued, so that a file that exists or
// cannot be created is refused before anything is recorded: a kubeconfig
// recorded but never written would hold the old-CA usage gate up to its
// --ttl.
func createKubeconfigFile(file string) (*os.File, error) {
	f, err := createNewFile(file)
	switch {
	case errors.Is(err, fs.ErrExist):
		return nil, fmt.Errorf("--output-file %s: the file exists: the kubeconfig goes into a new file only", file)
	case errors.Is(err, fs.ErrNotExist):
		if _, serr := os.Stat(filepath.Dir(file)); serr != nil {
			return nil, fmt.Errorf("--output-file %s: no directory to write it into: %w", file, err)
		}
		return nil, fmt.Errorf("--output-file %s: cannot be created: %w", file, err)
	case err != nil:
		return nil, fmt.Errorf("--output-file: %w", err)
	}
	return f, nil
}

// maxCommonName is the longest common name X.509 allows (RFC 5280 ub-common-name).
const maxCommonName = 64

// checkKubeconfigName refuses a --name that would not tell its user apart in
// the record of issued kubeconfigs (empty: everyone who passes it shares
// carousel:admin:), that a terminal or an audit log would show otherwise
// than written (control or non-printable characters, spaces), or that makes
// the certificate's common name longer than X.509 allows.
func checkKubeconfigName(name string) error {
	switch {
	case name == "":
		return errors.New("--name is empty: it tells your kubeconfigs apart from others' in the record of issued kubeconfigs")
	case strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0:
		return fmt.Errorf("--name %q: only printable characters without spaces (set --name, whose default is <login>@<host>)", name)
	case len("carousel:admin:"+name) > maxCommonName:
		return fmt.Errorf("--name %q: at most %d bytes (set --name, whose default is <login>@<host>)", name, maxCommonName-len("carousel:admin:"))
	}
	return nil
}

// defaultKubeconfigName is whoever runs the plugin, where:
// kubeconfigName of the login name and the host name.
func defaultKubeconfigName() string {
	var login string
	if u, err := user.Current(); err == nil {
		login = u.Username
	}
	host, _ := os.Hostname()
	return kubeconfigName(login, host)
}

// kubeconfigName is <login>@<host>, so that two people's kubeconfigs are
// told apart in the record of issued kubeconfigs, where a new one moves its
// user to the CA of now, and in the audit log: the login alone (root on two
// machines, or in two containers) would let one person's new kubeconfig
// hide another's from the old-CA usage gate. The host is its first label;
// kubectl-carousel stands for a login that cannot be told.
func kubeconfigName(login, host string) string {
	login = cmp.Or(login, "kubectl-carousel")
	if host, _, _ = strings.Cut(host, "."); host == "" {
		return login
	}
	return login + "@" + host
}

// recordKubeconfig adds issued to the Cluster's record of the kubeconfigs
// the plugin issued (oldca.Kubeconfigs), which the old-CA usage gate reads:
// a kubeconfig it did not know of would be locked out unseen when a
// rotation drops the CA that signed it. The record belongs to the Cluster,
// which the operator reconciles when it changes.
func recordKubeconfig(ctx context.Context, c client.Client, cl *v1alpha1.Cluster, issued oldca.IssuedCertificate, now time.Time) error {
	key := client.ObjectKey{Namespace: cl.Namespace, Name: credentials.IssuedKubeconfigsConfigMapName(cl.Name)}
	return credentials.WriteRecord(func() error {
		cm := &corev1.ConfigMap{}
		err := c.Get(ctx, key, cm)
		if apierrors.IsNotFound(err) {
			record := &oldca.Kubeconfigs{}
			record.Add(issued, now)
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{v1alpha1.LabelCluster: cl.Name}, OwnerReferences: []metav1.OwnerReference{controlledBy(cl)}},
				Data: map[string]string{oldca.KubeconfigsDataKey: record.String()}}
			return c.Create(ctx, cm)
		}
		if err != nil {
			return err
		}
		record, err := oldca.ParseKubeconfigs(cm.Data[oldca.KubeconfigsDataKey])
		if err != nil {
			return fmt.Errorf("ConfigMap %s: %w (repair it: deleting it loses the kubeconfigs it recorded, which the old-CA usage gate and an abort judge by)", key, err)
		}
		record.Add(issued, now)
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[oldca.KubeconfigsDataKey] = record.String()
		// The label and the controller are how the operator finds the
		// record and hears of its changes: put them back if they went.
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels[v1alpha1.LabelCluster] = cl.Name
		if metav1.GetControllerOf(cm) == nil {
			cm.OwnerReferences = append(cm.OwnerReferences, controlledBy(cl))
		}
		return c.Update(ctx, cm) // with the resourceVersion read: a conflict reads again
	})
}

// controlledBy is the reference to cl as the controller of an object the
// plugin writes, without blockOwnerDeletion: setting it needs the update of
// clusters/finalizers, which the edit role does not grant, where
// OwnerReferencesPermissionEnforcement runs.
func controlledBy(cl *v1alpha1.Cluster) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Cluster", Name: cl.Name, UID: cl.UID, Controller: ptr.To(true)}
}
