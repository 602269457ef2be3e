package plugin

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/fsync"
)

// The data keys that `certs download` writes into files: a CA Secret's as
// <role>-ca-<key>, the service-account key Secret's under their own names.
var (
	caFileKeys = []string{v1alpha1.DataKeyCertificate, v1alpha1.DataKeyPrivateKey,
		credentials.DataKeyPreviousCertificate, credentials.DataKeyPreviousPrivateKey}
	serviceAccountFileKeys = []string{credentials.DataKeyServiceAccountKey,
		credentials.DataKeyServiceAccountPublicKey, credentials.DataKeyServiceAccountNextKey}
)

func caFileName(role v1alpha1.CARole, key string) string {
	return fmt.Sprintf("%s-ca-%s", role, key)
}

// downloadable reports whether name is one of the files download writes.
func downloadable(name string) bool {
	if slices.Contains(serviceAccountFileKeys, name) {
		return true
	}
	for _, role := range v1alpha1.CARoles() {
		for _, key := range caFileKeys {
			if name == caFileName(role, key) {
				return true
			}
		}
	}
	return false
}

// files are what `certs download` writes: the certificates and keys of each
// CA Secret and of the service-account key Secret, under the names
// caFileKeys and serviceAccountFileKeys give them. Anyone who can write
// those Secrets in the Cluster's namespace can add data keys, and the
// uploaded copy keeps them (certs restore recreates the Secrets whole); as
// file names they would choose what download writes on the user's machine
// (a .bashrc, a kubeconfig beside it), so they are left out and named in
// ignored (<secret>/<key>; the bare name in a legacy upload).
func (u *certsUpload) files() (files map[string][]byte, ignored []string) {
	files = map[string][]byte{}
	for name, data := range u.legacyFiles {
		if downloadable(name) {
			files[name] = data
		} else {
			ignored = append(ignored, name)
		}
	}
	for _, s := range u.secrets {
		for key, data := range s.Data {
			name, ok := key, slices.Contains(serviceAccountFileKeys, key)
			if s.Role != "" {
				name, ok = caFileName(s.Role, key), slices.Contains(caFileKeys, key)
			}
			if ok && downloadable(name) {
				files[name] = data
			} else {
				ignored = append(ignored, s.Name+"/"+key)
			}
		}
	}
	slices.Sort(ignored)
	return files, ignored
}

// writeNewFiles writes each file into dir (made with mode 0700 if missing)
// with mode 0600, and none if one of them exists: download never replaces a
// file, nor writes through a link (O_EXCL, which also stops it at a file
// that appears after the check: writeAllOrNone). It returns the names
// written, in order.
func writeNewFiles(dir string, files map[string][]byte) ([]string, error) {
	names := slices.Sorted(maps.Keys(files))
	if err := fsync.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var existing []string
	for _, name := range names {
		_, err := os.Lstat(filepath.Join(dir, name))
		switch {
		case err == nil:
			existing = append(existing, name)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
	}
	if len(existing) > 0 {
		return nil, fmt.Errorf("%s already has %s; download replaces no file: choose a new directory with --dir", dir, strings.Join(existing, ", "))
	}
	if err := writeAllOrNone(dir, names, files); err != nil {
		return nil, err
	}
	return names, nil
}

// writeAllOrNone writes each of names into a new file of dir, or none: when
// one fails (a file of that name appeared, the disk is full), it removes
// those it wrote before.
func writeAllOrNone(dir string, names []string, files map[string][]byte) error {
	for i, name := range names {
		if err := writeNewFile(filepath.Join(dir, name), files[name]); err != nil {
			for _, written := range names[:i] {
				err = errors.Join(err, os.Remove(filepath.Join(dir, written)))
			}
			return err
		}
	}
	return nil
}

// writeNewFile creates path with mode 0600 and data, on disk (the file and
// its directory synced) when it returns, and removes what it created if the
// write fails.
func writeNewFile(path string, data []byte) error {
	f, err := createNewFile(path)
	if err != nil {
		return err
	}
	return fillNewFile(f, data)
}

// createNewFile creates path, which must not exist, with mode 0600.
func createNewFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
}

// fillNewFile writes data into f, a file createNewFile made, and closes it,
// on disk (the file and its directory synced) when it returns; if that
// fails, it removes the file.
func fillNewFile(f *os.File, data []byte) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsync.Dir(filepath.Dir(f.Name()))
	}
	if err != nil {
		return errors.Join(err, os.Remove(f.Name()))
	}
	return nil
}

func (e *env) downloadCommand() *cobra.Command {
	var id, keyHex, dir string
	cmd := &cobra.Command{
		Use:   "download CLUSTER",
		Short: "Decrypt an uploaded copy of CLUSTER's CA keys into a directory",
		Long: `Decrypt the copy of CLUSTER's CA keys that "certs upload" stored, with the upload ID and the certificate key
it printed, and write each certificate and key into a new file of --dir (mode 0600): <role>-ca-tls.crt and
<role>-ca-tls.key for each CA role (and <role>-ca-previous-tls.crt and .key during a rotation), sa.key and sa.pub
(and sa-next.key) for the service-account key. It replaces no file: if one of these exists in --dir, it writes
none. Other data keys of those Secrets are left out, with a warning that names them.`,
		Example: `  # Write the uploaded keys of prod into ./prod-pki
  kubectl carousel certs download prod -n team-a --upload-id abc123 --certificate-key <64 hex digits> --dir prod-pki`,
		Args:              oneCluster,
		ValidArgsFunction: e.completeClusters,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			key, err := parseCertificateKey(keyHex)
			if err != nil {
				return err
			}
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			upload, err := e.openUpload(ctx, c, ns, args[0], id, key)
			if err != nil {
				return err
			}
			files, ignored := upload.files()
			names, err := writeNewFiles(dir, files)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.streams.Out, "Wrote %d files to %s: %s\n", len(names), dir, strings.Join(names, ", "))
			if len(ignored) > 0 {
				fmt.Fprintf(e.streams.ErrOut, "warning: left out data keys Carousel does not write, whose names would have chosen the files: %s\n", strings.Join(ignored, ", "))
			}
			e.sweepUploads(ctx, c)
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "upload-id", "", "The upload ID that \"certs upload\" printed")
	cmd.Flags().StringVar(&keyHex, "certificate-key", "", "The certificate key that \"certs upload\" printed")
	cmd.Flags().StringVar(&dir, "dir", ".", "Directory to write the files into (made if missing); none of the files may exist in it")
	_ = cmd.MarkFlagRequired("upload-id")
	_ = cmd.MarkFlagRequired("certificate-key")
	return cmd
}
