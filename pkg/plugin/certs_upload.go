package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/sealing"
)

// The encrypted copy of a Cluster's control-plane CA material (in the manner
// of kubeadm's `upload-certs`): AES-256-GCM with a fresh 32-byte key that is
// printed once and stored nowhere, in a kube-system Secret owned by a
// short-lived bootstrap token Secret, so that the copy is garbage-collected
// with the token once the token cleaner removes it.
const (
	certsSecretPrefix = "carousel-certs-"
	certsDataKey      = "certificates"
)

// uploadFormat marks a sealed payload that records whole Secrets. An upload
// of an earlier kubectl carousel is a bare JSON object of file names and
// contents: it can be downloaded, not restored.
const uploadFormat = 2

// uploadedSecret is a CA Secret or the service-account key Secret as the
// upload found it: everything needed to create it again as it was.
type uploadedSecret struct {
	// Role is the CA role; empty for the service-account key Secret.
	Role        v1alpha1.CARole   `json:"role,omitempty"`
	Name        string            `json:"name"`
	Type        corev1.SecretType `json:"type,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Data        map[string][]byte `json:"data"`
}

// sealedPayload is the plaintext of an upload.
type sealedPayload struct {
	Format  int              `json:"format"`
	Secrets []uploadedSecret `json:"secrets"`
}

// certsUpload is an opened upload.
type certsUpload struct {
	// secrets is nil for a legacy upload, which holds only legacyFiles.
	secrets     []uploadedSecret
	legacyFiles map[string][]byte
}

// sealCertificates encrypts the Secrets under key, bound to the Cluster (as
// additional data, so a copy cannot be passed off as another Cluster's).
func sealCertificates(secrets []uploadedSecret, key []byte, cluster string) ([]byte, error) {
	plain, err := json.Marshal(sealedPayload{Format: uploadFormat, Secrets: secrets})
	if err != nil {
		return nil, err
	}
	return sealing.Seal(plain, key, cluster)
}

// openCertificates decrypts what sealCertificates, or an earlier version of
// it, produced.
func openCertificates(sealed, key []byte, cluster string) (*certsUpload, error) {
	plain, err := sealing.Open(sealed, key, cluster)
	if errors.Is(err, sealing.ErrNotOpened) {
		return nil, errors.New("the certificate key does not open this upload (wrong key, or another cluster's copy)")
	}
	if err != nil {
		return nil, err
	}
	return decodePayload(plain)
}

// decodePayload tells the two formats apart by the format field: in a legacy
// upload every value is a file's contents, a JSON string.
func decodePayload(plain []byte) (*certsUpload, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(plain, &fields); err != nil {
		return nil, fmt.Errorf("the uploaded copy is not readable: %w", err)
	}
	if f, ok := fields["format"]; !ok || len(f) == 0 || f[0] == '"' {
		files := map[string][]byte{}
		if err := json.Unmarshal(plain, &files); err != nil {
			return nil, fmt.Errorf("the uploaded copy is not readable: %w", err)
		}
		return &certsUpload{legacyFiles: files}, nil
	}
	var payload sealedPayload
	if err := json.Unmarshal(plain, &payload); err != nil {
		return nil, fmt.Errorf("the uploaded copy is not readable: %w", err)
	}
	if payload.Format != uploadFormat {
		return nil, fmt.Errorf("the uploaded copy has format %d, which this kubectl carousel does not know; use the version that made it", payload.Format)
	}
	if payload.Secrets == nil {
		payload.Secrets = []uploadedSecret{}
	}
	return &certsUpload{secrets: payload.Secrets}, nil
}

// uploadSecrets collects the Cluster's CA Secrets and service-account key
// Secret, with their names, types, labels and annotations. A CA Secret it
// cannot find fails it; a service-account key Secret it cannot find is left
// out with a warning (the copy of the CAs is still worth having).
func uploadSecrets(secrets map[string]*corev1.Secret, cl *v1alpha1.Cluster) (out []uploadedSecret, warning string, err error) {
	for _, role := range v1alpha1.CARoles() {
		name := credentials.CASecretName(cl.Name, role)
		s := secrets[name]
		if s == nil {
			// secrets holds those with the Cluster's label: one that lost
			// it is not lost (the Ready condition says which it is).
			return nil, "", fmt.Errorf("the %s CA Secret %s is missing, or lacks the label %s=%s (the Cluster's Ready condition says which, and how to put the label back)",
				role, name, v1alpha1.LabelCluster, cl.Name)
		}
		out = append(out, asUploaded(s, role))
	}
	name := credentials.ServiceAccountKeySecretName(cl.Name)
	if sa := secrets[name]; sa != nil {
		out = append(out, asUploaded(sa, ""))
	} else {
		warning = fmt.Sprintf("the service-account key Secret %s is missing, or lacks the label %s=%s: the upload holds no service-account key (the Cluster's Ready condition says which)",
			name, v1alpha1.LabelCluster, cl.Name)
	}
	return out, warning, nil
}

func asUploaded(s *corev1.Secret, role v1alpha1.CARole) uploadedSecret {
	return uploadedSecret{Role: role, Name: s.Name, Type: s.Type, Labels: s.Labels, Annotations: s.Annotations, Data: s.Data}
}

// parseCertificateKey reads the key `certs upload` printed.
func parseCertificateKey(keyHex string) ([]byte, error) {
	key, err := sealing.ParseKey(keyHex)
	if err != nil {
		return nil, fmt.Errorf("--certificate-key must be the %d hex characters upload printed", 2*sealing.KeyBytes)
	}
	return key, nil
}

// openUpload reads upload id, refuses it once it is gone or expired, and
// decrypts it as the copy of the Cluster ns/cluster: a wrong key or another
// Cluster's copy does not open.
func (e *env) openUpload(ctx context.Context, c client.Client, ns, cluster, id string, key []byte) (*certsUpload, error) {
	token := &corev1.Secret{}
	err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(id)}, token)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("upload %s does not exist or has expired (%s)", id, uploadAgain(cluster))
	}
	if err != nil {
		return nil, err
	}
	if !uploadLive(token, e.serverNow()) {
		return nil, fmt.Errorf("upload %s expired at %s (%s)", id, token.Data[bootstrapapi.BootstrapTokenExpirationKey], uploadAgain(cluster))
	}
	copySecret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: certsSecretPrefix + id}, copySecret); err != nil {
		return nil, fmt.Errorf("upload %s: %w", id, err)
	}
	return openCertificates(copySecret.Data[certsDataKey], key, ns+"/"+cluster)
}

func uploadAgain(cluster string) string {
	return "an upload is kept only for its --ttl; a new one, made while every CA Secret exists: kubectl carousel certs upload " + cluster
}

// uploadLive reports whether an upload's bootstrap token has not expired; a
// token without a readable expiration counts as expired.
func uploadLive(token *corev1.Secret, now time.Time) bool {
	expires, err := time.Parse(time.RFC3339, string(token.Data[bootstrapapi.BootstrapTokenExpirationKey]))
	return err == nil && now.Before(expires)
}

// Bounds of `certs upload --ttl`: a copy that has expired already opens
// nothing, and one kept for days would be a backup of every CA key in
// kube-system, which it is not meant to be.
const (
	minUploadTTL = 10 * time.Minute
	maxUploadTTL = 24 * time.Hour
)

func (e *env) uploadCommand() *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "upload CLUSTER",
		Short: "Store an encrypted copy of CLUSTER's CA keys for a short time and print the key that opens it",
		Long: `Store a copy of CLUSTER's CA Secrets (every role's CA key and the service-account key), encrypted with a new
random key, in the management cluster's kube-system namespace for --ttl, and print the upload ID and the key
that opens it. The key is printed once and stored nowhere: keep it where you keep secrets.

"certs download" writes the keys into files, "certs restore" recreates CA Secrets that were lost. Once --ttl
passes the copy no longer opens, and it is deleted with its bootstrap token by the next "certs upload", "certs
download" or "certs restore" of any Cluster, or by kube-controller-manager's tokencleaner where it runs (off by
default outside kubeadm): nothing else deletes it.`,
		Example: `  # Keep a copy of prod's CA keys for the next two hours (before maintenance, say)
  kubectl carousel certs upload prod -n team-a --ttl 2h`,
		Args:              oneCluster,
		ValidArgsFunction: e.completeClusters,
		RunE: func(cmd *cobra.Command, args []string) error {
			if ttl < minUploadTTL || ttl > maxUploadTTL {
				return fmt.Errorf("--ttl must be between %s and %s", minUploadTTL, maxUploadTTL)
			}
			ctx := cmd.Context()
			c, cl, err := e.clusterArg(ctx, args[0])
			if err != nil {
				return err
			}
			secrets, err := secretsOf(ctx, c, cl)
			if err != nil {
				return err
			}
			uploaded, warning, err := uploadSecrets(secrets, cl)
			if err != nil {
				return err
			}
			if warning != "" {
				fmt.Fprintf(e.streams.ErrOut, "warning: %s\n", warning)
			}
			key, err := sealing.NewKey()
			if err != nil {
				return err
			}
			sealed, err := sealCertificates(uploaded, key, cl.Namespace+"/"+cl.Name)
			if err != nil {
				return err
			}
			raw, err := bootstraputil.GenerateBootstrapToken()
			if err != nil {
				return err
			}
			id := raw[:bootstrapapi.BootstrapTokenIDBytes]
			expires := e.serverNow().Add(ttl).UTC().Truncate(time.Second)
			if err := e.deleteExpiredUploads(ctx, c); err != nil {
				return err
			}
			label := map[string]string{v1alpha1.LabelCertsUpload: string(cl.UID)}
			token := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(id), Labels: label},
				Type:       bootstrapapi.SecretTypeBootstrapToken,
				StringData: map[string]string{
					bootstrapapi.BootstrapTokenIDKey: id, bootstrapapi.BootstrapTokenSecretKey: raw[bootstrapapi.BootstrapTokenIDBytes+1:],
					bootstrapapi.BootstrapTokenExpirationKey:  expires.Format(time.RFC3339),
					bootstrapapi.BootstrapTokenDescriptionKey: fmt.Sprintf("owns Carousel's encrypted certificate copy of %s/%s; authenticates nobody", cl.Namespace, cl.Name),
				},
			}
			copySecret := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: certsSecretPrefix + id, Labels: label},
				Data:       map[string][]byte{certsDataKey: sealed},
			}
			if err := storeUpload(ctx, c, token, copySecret); err != nil {
				return err
			}
			files, _ := (&certsUpload{secrets: uploaded}).files()
			if err := printUpload(e.streams.Out, cl, id, key, len(uploaded), len(files), expires); err != nil {
				// The key is nowhere: nobody can open the copy, which goes now.
				cleanup, cancel := cleanupContext(ctx)
				defer cancel()
				if deleteErr := errors.Join(client.IgnoreNotFound(c.Delete(cleanup, copySecret)), client.IgnoreNotFound(c.Delete(cleanup, token))); deleteErr != nil {
					return fmt.Errorf("printing the certificate key: %w; deleting the upload, which nobody can open: %w", err, deleteErr)
				}
				return fmt.Errorf("printing the certificate key: %w; upload %s, which nobody can open, is deleted", err, id)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 2*time.Hour, fmt.Sprintf("How long the encrypted copy is kept, between %s and %s", minUploadTTL, maxUploadTTL))
	return cmd
}

// storeUpload creates an upload's bootstrap token, then the encrypted copy,
// owned by the token (the garbage collector deletes it with it). When the
// copy cannot be stored the token is deleted, on a context of its own: a
// copy stored all the same (a write that timed out, or one the user's Ctrl-C
// cut short) goes with it, since its key is never shown.
func storeUpload(ctx context.Context, c client.Client, token, copySecret *corev1.Secret) error {
	if err := c.Create(ctx, token); err != nil {
		return fmt.Errorf("creating the owning bootstrap token: %w", err)
	}
	copySecret.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: token.Name, UID: token.UID}}
	if err := c.Create(ctx, copySecret); err != nil {
		cleanup, cancel := cleanupContext(ctx)
		defer cancel()
		if deleteErr := client.IgnoreNotFound(c.Delete(cleanup, token)); deleteErr != nil {
			return fmt.Errorf("storing the encrypted copy: %w; deleting its bootstrap token %s: %w", err, token.Name, deleteErr)
		}
		return fmt.Errorf("storing the encrypted copy: %w; its bootstrap token %s is deleted", err, token.Name)
	}
	return nil
}

// printUpload tells what was uploaded, the certificate key (shown once,
// stored nowhere) and how to use it; a write that fails is returned.
func printUpload(w io.Writer, cl *v1alpha1.Cluster, id string, key []byte, secrets, files int, expires time.Time) error {
	_, err := fmt.Fprintf(w, "Uploaded %d Secrets (%d files) of %s/%s as upload %s, expiring at %s (deleted with its token by the next "+
		"certs command after that, or by kube-controller-manager's tokencleaner where it runs).\n"+
		"Certificate key (shown once, stored nowhere):\n%s\n"+
		"Download with:\n  kubectl carousel certs download %s -n %s --upload-id %s --certificate-key <key> --dir <dir>\n"+
		"Recreate a lost CA Secret with:\n  kubectl carousel certs restore %s -n %s --upload-id %s --certificate-key <key>\n",
		secrets, files, cl.Namespace, cl.Name, id, expires.Format(time.RFC3339), sealing.EncodeKey(key),
		cl.Name, cl.Namespace, id, cl.Name, cl.Namespace, id)
	return err
}

// deleteExpiredUploads deletes every upload whose bootstrap token has
// expired, the token and the encrypted copy both, and every encrypted copy
// whose token is gone. Nothing else may do it: kube-controller-manager's
// tokencleaner is off by default outside kubeadm, and a copy's owner
// reference needs the garbage collector. An upload whose token has not
// expired is never deleted.
func (e *env) deleteExpiredUploads(ctx context.Context, c client.Client) error {
	var list corev1.SecretList
	if err := c.List(ctx, &list, client.InNamespace(metav1.NamespaceSystem), client.HasLabels{v1alpha1.LabelCertsUpload}); err != nil {
		return fmt.Errorf("listing uploads: %w", err)
	}
	for _, name := range expiredUploads(list.Items, e.serverNow()) {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: name}}
		if err := c.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting expired upload Secret %s: %w", name, err)
		}
	}
	return nil
}

// sweepUploads is deleteExpiredUploads for the commands that read an upload:
// housekeeping that fails (for example without the right to list Secrets in
// kube-system) is reported and does not fail them.
func (e *env) sweepUploads(ctx context.Context, c client.Client) {
	if err := e.deleteExpiredUploads(ctx, c); err != nil {
		fmt.Fprintf(e.streams.ErrOut, "warning: expired uploads were not deleted: %v\n", err)
	}
}

// expiredUploads names, among the Secrets labelled as uploads, those to
// delete: each bootstrap token that has expired with its copy, and each copy
// whose owning token is missing, expired or another Secret of the same name.
// Copies made by a concurrent upload are safe: its token is created first,
// so a list that holds the copy holds the live token too.
func expiredUploads(items []corev1.Secret, now time.Time) []string {
	tokens := map[string]*corev1.Secret{}
	for i := range items {
		if items[i].Type == bootstrapapi.SecretTypeBootstrapToken {
			tokens[items[i].Name] = &items[i]
		}
	}
	var out []string
	for i := range items {
		s := &items[i]
		switch {
		case s.Type == bootstrapapi.SecretTypeBootstrapToken:
			if !uploadLive(s, now) {
				out = append(out, s.Name, certsSecretPrefix+string(s.Data[bootstrapapi.BootstrapTokenIDKey]))
			}
		case strings.HasPrefix(s.Name, certsSecretPrefix):
			owner, uid := bootstraputil.BootstrapTokenSecretName(strings.TrimPrefix(s.Name, certsSecretPrefix)), types.UID("")
			for _, ref := range s.OwnerReferences {
				if ref.APIVersion == "v1" && ref.Kind == "Secret" {
					owner, uid = ref.Name, ref.UID
				}
			}
			if token := tokens[owner]; token == nil || !uploadLive(token, now) || (uid != "" && uid != token.UID) {
				out = append(out, s.Name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
