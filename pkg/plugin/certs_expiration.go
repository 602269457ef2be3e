package plugin

import (
	"context"
	"crypto/x509"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
)

func short(fingerprint string) string {
	if len(fingerprint) > 16 {
		return fingerprint[:16]
	}
	return fingerprint
}

// checkExpirationCommand is `certs check-expiration`, a table like kubeadm's.
func (e *env) checkExpirationCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check-expiration CLUSTER",
		Short: "Show when each certificate and certificate authority of CLUSTER expires",
		Args:  oneCluster,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, cl, err := e.clusterArg(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return e.writeExpiration(cmd.Context(), c, cl)
		},
	}
}

func (e *env) writeExpiration(ctx context.Context, c client.Client, cl *v1alpha1.Cluster) error {
	secrets, err := secretsOf(ctx, c, cl)
	if err != nil {
		return err
	}
	now := e.clock.Now()
	residual := func(cert *x509.Certificate) string {
		if !now.Before(cert.NotAfter) {
			return "<expired>"
		}
		return duration.HumanDuration(cert.NotAfter.Sub(now))
	}
	tw := tabwriter.NewWriter(e.streams.Out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "CERTIFICATE\tEXPIRES\tRESIDUAL TIME\tCERTIFICATE AUTHORITY\tSECRET")
	for _, cert := range credentials.Certificates(cl) {
		name := credentials.CertificateSecretName(cl.Name, cert.Name)
		s := secrets[name]
		if s == nil {
			fmt.Fprintf(tw, "%s\t<missing>\t\t%s\t%s\n", cert.Name, cert.SignedBy, name)
			continue
		}
		certs, err := pki.ParseCertificates(s.Data[v1alpha1.DataKeyCertificate])
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cert.Name, certs[0].NotAfter.UTC().Format("Jan 02, 2006 15:04 MST"), residual(certs[0]), cert.SignedBy, name)
	}
	_ = tw.Flush()
	fmt.Fprintln(e.streams.Out)
	tw = tabwriter.NewWriter(e.streams.Out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "CERTIFICATE AUTHORITY\tEXPIRES\tRESIDUAL TIME\tGENERATION")
	for _, role := range v1alpha1.CARoles() {
		s := secrets[credentials.CASecretName(cl.Name, role)]
		if s == nil {
			fmt.Fprintf(tw, "%s\t<missing>\t\t\n", role)
			continue
		}
		cas, err := credentials.DecodeCASecret(s)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\tcurrent\n", role, cas.Current.Cert.NotAfter.UTC().Format("Jan 02, 2006 15:04 MST"), residual(cas.Current.Cert))
		if cas.Previous != nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\tprevious\n", role, cas.Previous.Cert.NotAfter.UTC().Format("Jan 02, 2006 15:04 MST"), residual(cas.Previous.Cert))
		}
	}
	return tw.Flush()
}
