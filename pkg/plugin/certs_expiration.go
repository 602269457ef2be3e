package plugin

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	outputv1alpha1 "github.com/carousel-dev/carousel/apis/output/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// checkExpirationCommand is `certs check-expiration`, a table like kubeadm's.
func (e *env) checkExpirationCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check-expiration CLUSTER",
		Short: "Show when each certificate and certificate authority of CLUSTER expires",
		Long: `Show when each certificate Carousel issues for CLUSTER expires, and each CA: the current one of every role and,
during a rotation, the previous one. The dates are read from the Secrets in CLUSTER's namespace labelled for it;
one that does not exist, or lost its labels, shows as <missing>, and one whose certificate cannot be read as
<unreadable>: the command prints every row it can, then fails naming what it could not read, and each CA the
Cluster's status records whose Secret is missing or lacks its label (a lost CA; a Cluster not issued yet only shows <missing>).

Carousel renews leaf certificates itself; a residual time that keeps shrinking means a renewal fails (see the
Cluster's conditions with "kubectl carousel rotation status"). A CA only changes through a rotation.`,
		Example: `  # When does anything of the Cluster prod expire?
  kubectl carousel certs check-expiration prod -n team-a

  # The CA that expires first, for a script
  kubectl carousel certs check-expiration prod -n team-a -o json | jq -r '.certificateAuthorities | map(select(.expirationDate)) | min_by(.expirationDate) | .role'`,
		Args:              oneCluster,
		ValidArgsFunction: e.completeClusters,
	}
	out := addOutputFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, cl, err := e.clusterArg(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		info, err := expirationInfo(cmd.Context(), c, cl, e.clock.Now())
		if err != nil {
			return err
		}
		if out.printer != nil {
			err = out.printer.PrintObj(info, e.streams.Out)
		} else {
			err = writeExpiration(e.streams.Out, info)
		}
		if err != nil {
			return err
		}
		return unreadableRows(info, cl)
	}
	return cmd
}

// expirationInfo reads the expiry of the Cluster's certificates and CAs from their Secrets.
func expirationInfo(ctx context.Context, c client.Client, cl *v1alpha1.Cluster, now time.Time) (*outputv1alpha1.CertificateExpirationInfo, error) {
	secrets, err := secretsOf(ctx, c, cl)
	if err != nil {
		return nil, err
	}
	expiry := func(cert *x509.Certificate) (*metav1.Time, metav1.Duration) {
		return &metav1.Time{Time: cert.NotAfter.UTC()}, metav1.Duration{Duration: max(cert.NotAfter.Sub(now), 0).Truncate(time.Second)}
	}
	info := &outputv1alpha1.CertificateExpirationInfo{Cluster: cl.Namespace + "/" + cl.Name}
	for _, cert := range credentials.Certificates(cl) {
		name := credentials.CertificateSecretName(cl.Name, cert.Name)
		row := outputv1alpha1.CertificateExpiration{Name: cert.Name, Secret: name, CertificateAuthority: string(cert.SignedBy)}
		if s := secrets[name]; s == nil {
			row.Missing = true
		} else {
			certs, err := pki.ParseCertificates(s.Data[v1alpha1.DataKeyCertificate])
			if err != nil {
				row.Unreadable = err.Error()
			} else {
				row.ExpirationDate, row.ResidualTime = expiry(certs[0])
			}
		}
		info.Certificates = append(info.Certificates, row)
	}
	for _, role := range v1alpha1.CARoles() {
		s := secrets[credentials.CASecretName(cl.Name, role)]
		if s == nil {
			info.CertificateAuthorities = append(info.CertificateAuthorities, outputv1alpha1.CertificateAuthorityExpiration{Role: string(role), Missing: true})
			continue
		}
		cas, err := credentials.DecodeCASecret(s)
		if err != nil {
			info.CertificateAuthorities = append(info.CertificateAuthorities, outputv1alpha1.CertificateAuthorityExpiration{Role: string(role), Unreadable: err.Error()})
			continue
		}
		row := outputv1alpha1.CertificateAuthorityExpiration{Role: string(role), Generation: "current"}
		row.ExpirationDate, row.ResidualTime = expiry(cas.Current.Cert)
		info.CertificateAuthorities = append(info.CertificateAuthorities, row)
		if cas.Previous != nil {
			row := outputv1alpha1.CertificateAuthorityExpiration{Role: string(role), Generation: "previous"}
			row.ExpirationDate, row.ResidualTime = expiry(cas.Previous.Cert)
			info.CertificateAuthorities = append(info.CertificateAuthorities, row)
		}
	}
	return info, nil
}

// writeExpiration prints the two tables of check-expiration, as kubeadm's does.
func writeExpiration(w io.Writer, info *outputv1alpha1.CertificateExpirationInfo) error {
	date := func(t *metav1.Time) string { return t.Format("Jan 02, 2006 15:04 MST") }
	residual := func(d metav1.Duration) string {
		if d.Duration <= 0 {
			return "<expired>"
		}
		return duration.HumanDuration(d.Duration)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "CERTIFICATE\tEXPIRES\tRESIDUAL TIME\tCERTIFICATE AUTHORITY\tSECRET")
	for _, c := range info.Certificates {
		if c.ExpirationDate == nil {
			fmt.Fprintf(tw, "%s\t%s\t\t%s\t%s\n", c.Name, noDate(c.Missing), c.CertificateAuthority, c.Secret)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, date(c.ExpirationDate), residual(c.ResidualTime), c.CertificateAuthority, c.Secret)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "CERTIFICATE AUTHORITY\tEXPIRES\tRESIDUAL TIME\tGENERATION")
	for _, ca := range info.CertificateAuthorities {
		if ca.ExpirationDate == nil {
			fmt.Fprintf(tw, "%s\t%s\t\t\n", ca.Role, noDate(ca.Missing))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ca.Role, date(ca.ExpirationDate), residual(ca.ResidualTime), ca.Generation)
	}
	return tw.Flush()
}

// noDate is what the EXPIRES column shows for a row without a date: its
// Secret is missing, or what it holds cannot be read.
func noDate(missing bool) string {
	if missing {
		return "<missing>"
	}
	return "<unreadable>"
}

// unreadableRows is the error of check-expiration once it has printed every
// row it could: which certificates and CAs could not be read, and why, and
// which CAs the Cluster's status records are missing (lost, as its Ready
// condition says: a script checking expiry must not pass over them). A CA
// not recorded yet (a Cluster not issued yet) is only shown as missing.
func unreadableRows(info *outputv1alpha1.CertificateExpirationInfo, cl *v1alpha1.Cluster) error {
	var errs []error
	for _, c := range info.Certificates {
		if c.Unreadable != "" {
			errs = append(errs, fmt.Errorf("certificate %s (Secret %s): %s", c.Name, c.Secret, c.Unreadable))
		}
	}
	for _, ca := range info.CertificateAuthorities {
		switch recorded := inventoryOf(cl, v1alpha1.CARole(ca.Role)); {
		case ca.Unreadable != "":
			errs = append(errs, fmt.Errorf("%s CA: %s", ca.Role, ca.Unreadable))
		case ca.Missing && recorded != nil && recorded.Current != nil:
			errs = append(errs, fmt.Errorf("%s CA: Secret %s is missing (or lost its carousel.dev/cluster label), though the Cluster's status records the CA (see its Ready condition)",
				ca.Role, credentials.CASecretName(cl.Name, v1alpha1.CARole(ca.Role))))
		}
	}
	return errors.Join(errs...)
}
