package plugin

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

// The encrypted copy of a Cluster's control-plane CA material (in the manner
// of kubeadm's `upload-certs`): AES-256-GCM with a fresh 32-byte key that is
// printed once and stored nowhere, in a kube-system Secret owned by a
// short-lived bootstrap token Secret, so that the copy is garbage-collected
// with the token once the token cleaner removes it.
const (
	certsSecretPrefix = "carousel-certs-"
	certsDataKey      = "certificates"
	// LabelCertsUpload marks the upload Secrets (the owning bootstrap token and
	// the encrypted copy) with the Cluster's UID: a namespace and name together
	// can be longer than a label value may be.
	LabelCertsUpload = "carousel.dev/certs-upload"
	keyBytes         = 32
)

// sealCertificates encrypts files under key, bound to the Cluster (as
// additional data, so a copy cannot be passed off as another Cluster's).
func sealCertificates(files map[string][]byte, key []byte, cluster string) ([]byte, error) {
	plain, err := json.Marshal(files)
	if err != nil {
		return nil, err
	}
	aead, err := gcm(key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, plain, []byte(cluster)), nil
}

// openCertificates decrypts what sealCertificates produced.
func openCertificates(sealed, key []byte, cluster string) (map[string][]byte, error) {
	aead, err := gcm(key)
	if err != nil {
		return nil, err
	}
	if len(sealed) < aead.NonceSize() {
		return nil, errors.New("the uploaded copy is truncated")
	}
	plain, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], []byte(cluster))
	if err != nil {
		return nil, errors.New("the certificate key does not open this upload (wrong key, or another cluster's copy)")
	}
	files := map[string][]byte{}
	return files, json.Unmarshal(plain, &files)
}

func gcm(key []byte) (cipher.AEAD, error) {
	if len(key) != keyBytes {
		return nil, fmt.Errorf("the certificate key must be %d bytes (%d hex characters)", keyBytes, 2*keyBytes)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// uploadFiles collects the Cluster's CA key pairs and service-account key.
func uploadFiles(secrets map[string]*corev1.Secret, cl *v1alpha1.Cluster) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, role := range v1alpha1.CARoles() {
		s := secrets[credentials.CASecretName(cl.Name, role)]
		if s == nil {
			return nil, fmt.Errorf("the %s CA Secret is missing", role)
		}
		for key, data := range s.Data {
			files[fmt.Sprintf("%s-ca-%s", role, key)] = data
		}
	}
	if sa := secrets[credentials.ServiceAccountKeySecretName(cl.Name)]; sa != nil {
		for key, data := range sa.Data {
			files[key] = data
		}
	}
	return files, nil
}

func (e *env) uploadCommand() *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "upload CLUSTER",
		Short: "Store an encrypted copy of CLUSTER's CA keys for a short time and print the key that opens it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, cl, err := e.clusterArg(ctx, args[0])
			if err != nil {
				return err
			}
			secrets, err := secretsOf(ctx, c, cl)
			if err != nil {
				return err
			}
			files, err := uploadFiles(secrets, cl)
			if err != nil {
				return err
			}
			key := make([]byte, keyBytes)
			if _, err := rand.Read(key); err != nil {
				return err
			}
			sealed, err := sealCertificates(files, key, cl.Namespace+"/"+cl.Name)
			if err != nil {
				return err
			}
			raw, err := bootstraputil.GenerateBootstrapToken()
			if err != nil {
				return err
			}
			id := raw[:bootstrapapi.BootstrapTokenIDBytes]
			expires := e.clock.Now().Add(ttl).UTC().Truncate(time.Second)
			if err := e.deleteExpiredUploads(ctx, c); err != nil {
				return err
			}
			label := map[string]string{LabelCertsUpload: string(cl.UID)}
			token := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(id), Labels: label},
				Type:       bootstrapapi.SecretTypeBootstrapToken,
				StringData: map[string]string{
					bootstrapapi.BootstrapTokenIDKey: id, bootstrapapi.BootstrapTokenSecretKey: raw[bootstrapapi.BootstrapTokenIDBytes+1:],
					bootstrapapi.BootstrapTokenExpirationKey:  expires.Format(time.RFC3339),
					bootstrapapi.BootstrapTokenDescriptionKey: fmt.Sprintf("owns Carousel's encrypted certificate copy of %s/%s; authenticates nobody", cl.Namespace, cl.Name),
				},
			}
			if err := c.Create(ctx, token); err != nil {
				return fmt.Errorf("creating the owning bootstrap token: %w", err)
			}
			copySecret := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: certsSecretPrefix + id, Labels: label,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: token.Name, UID: token.UID}}},
				Data: map[string][]byte{certsDataKey: sealed},
			}
			if err := c.Create(ctx, copySecret); err != nil {
				return fmt.Errorf("storing the encrypted copy: %w", err)
			}
			fmt.Fprintf(e.streams.Out, "Uploaded %d files of %s/%s as upload %s, deleted with its token at %s.\n", len(files), cl.Namespace, cl.Name, id, expires.Format(time.RFC3339))
			fmt.Fprintf(e.streams.Out, "Certificate key (shown once, stored nowhere):\n%s\n", hex.EncodeToString(key))
			fmt.Fprintf(e.streams.Out, "Download with:\n  kubectl carousel certs download %s -n %s --upload-id %s --certificate-key <key> --dir <dir>\n", cl.Name, cl.Namespace, id)
			return nil
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 2*time.Hour, "How long the encrypted copy is kept")
	return cmd
}

// deleteExpiredUploads deletes every upload whose bootstrap token has
// expired, the token and the encrypted copy both. Nothing else may do it:
// kube-controller-manager's tokencleaner is off by default outside kubeadm,
// and a copy's owner reference needs the garbage collector.
func (e *env) deleteExpiredUploads(ctx context.Context, c client.Client) error {
	var tokens corev1.SecretList
	if err := c.List(ctx, &tokens, client.InNamespace(metav1.NamespaceSystem), client.HasLabels{LabelCertsUpload}); err != nil {
		return fmt.Errorf("listing uploads: %w", err)
	}
	for i := range tokens.Items {
		token := &tokens.Items[i]
		if token.Type != bootstrapapi.SecretTypeBootstrapToken {
			continue
		}
		expires, err := time.Parse(time.RFC3339, string(token.Data[bootstrapapi.BootstrapTokenExpirationKey]))
		if err == nil && e.clock.Now().Before(expires) {
			continue
		}
		id := string(token.Data[bootstrapapi.BootstrapTokenIDKey])
		copySecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: certsSecretPrefix + id}}
		for _, obj := range []client.Object{copySecret, token} {
			if err := c.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting expired upload %s: %w", id, err)
			}
		}
	}
	return nil
}

func (e *env) downloadCommand() *cobra.Command {
	var id, keyHex, dir string
	cmd := &cobra.Command{
		Use:   "download CLUSTER",
		Short: "Decrypt an uploaded copy of CLUSTER's CA keys into a directory",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			key, err := hex.DecodeString(keyHex)
			if err != nil || len(key) != keyBytes {
				return fmt.Errorf("--certificate-key must be the %d hex characters upload printed", 2*keyBytes)
			}
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			token := &corev1.Secret{}
			err = c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(id)}, token)
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("upload %s does not exist or has expired: run `kubectl carousel certs upload %s` again", id, args[0])
			}
			if err != nil {
				return err
			}
			if expires, err := time.Parse(time.RFC3339, string(token.Data[bootstrapapi.BootstrapTokenExpirationKey])); err != nil || !e.clock.Now().Before(expires) {
				return fmt.Errorf("upload %s expired at %s: run `kubectl carousel certs upload %s` again", id, token.Data[bootstrapapi.BootstrapTokenExpirationKey], args[0])
			}
			copySecret := &corev1.Secret{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: certsSecretPrefix + id}, copySecret); err != nil {
				return fmt.Errorf("upload %s: %w", id, err)
			}
			files, err := openCertificates(copySecret.Data[certsDataKey], key, ns+"/"+args[0])
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			names := make([]string, 0, len(files))
			for name := range files {
				names = append(names, name)
			}
			slices.Sort(names)
			for _, name := range names {
				if strings.ContainsAny(name, `/\`) {
					return fmt.Errorf("refusing file name %q", name)
				}
				if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o600); err != nil {
					return err
				}
			}
			fmt.Fprintf(e.streams.Out, "Wrote %d files to %s: %s\n", len(names), dir, strings.Join(names, ", "))
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "upload-id", "", "The upload ID that `certs upload` printed")
	cmd.Flags().StringVar(&keyHex, "certificate-key", "", "The certificate key that `certs upload` printed")
	cmd.Flags().StringVar(&dir, "dir", ".", "Directory to write the files into")
	_ = cmd.MarkFlagRequired("upload-id")
	_ = cmd.MarkFlagRequired("certificate-key")
	return cmd
}
