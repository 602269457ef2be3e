package plugin

import (
	"context"
	"crypto/x509"
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
one that does not exist, or lost its labels, shows as <missing>.

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
			return out.printer.PrintObj(info, e.streams.Out)
		}
		return writeExpiration(e.streams.Out, info)
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
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			row.ExpirationDate, row.ResidualTime = expiry(certs[0])
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
			return nil, err
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
		if c.Missing {
			fmt.Fprintf(tw, "%s\t<missing>\t\t%s\t%s\n", c.Name, c.CertificateAuthority, c.Secret)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, date(c.ExpirationDate), residual(c.ResidualTime), c.CertificateAuthority, c.Secret)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "CERTIFICATE AUTHORITY\tEXPIRES\tRESIDUAL TIME\tGENERATION")
	for _, ca := range info.CertificateAuthorities {
		if ca.Missing {
			fmt.Fprintf(tw, "%s\t<missing>\t\t\n", ca.Role)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ca.Role, date(ca.ExpirationDate), residual(ca.ResidualTime), ca.Generation)
	}
	return tw.Flush()
}
