package plugin

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// when formats an optional timestamp, or "-".
func when(t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// writeStatus prints where a Cluster's CA rotation stands.
func writeStatus(w io.Writer, cl *v1alpha1.Cluster) {
	rot := cl.CARotation()
	if rot == nil {
		rot = &v1alpha1.CARotation{}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Cluster:\t%s/%s\n", cl.Namespace, cl.Name)
	fmt.Fprintf(tw, "Phase:\t%s\n", rotation.PhaseName(rot.Phase))
	if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ConditionCARotation); cond != nil && cond.Status == "True" {
		fmt.Fprintf(tw, "Waiting for:\t%s\n", cond.Message)
	}
	fmt.Fprintf(tw, "Last initiation:\t%s\n", when(rot.LastInitiationTime))
	fmt.Fprintf(tw, "Last initiation finished:\t%s\n", when(rot.LastInitiationFinishedTime))
	fmt.Fprintf(tw, "Last completion triggered:\t%s\n", when(rot.LastCompletionTriggeredTime))
	fmt.Fprintf(tw, "Last completion:\t%s\n", when(rot.LastCompletionTime))
	var pending []string
	for _, p := range rot.PendingWorkersRollouts {
		pending = append(pending, p.Name)
	}
	if len(pending) == 0 {
		pending = []string{"none"}
	}
	fmt.Fprintf(tw, "Pending worker rollouts:\t%s\n", strings.Join(pending, ", "))
	_ = tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tCURRENT FINGERPRINT\tCURRENT NOT AFTER\tPREVIOUS FINGERPRINT\tPREVIOUS NOT AFTER")
	if cl.Status.Credentials != nil {
		for _, inv := range cl.Status.Credentials.CertificateAuthorities {
			cur, curAfter, prev, prevAfter := "-", "-", "-", "-"
			if inv.Current != nil {
				cur, curAfter = short(inv.Current.Fingerprint), inv.Current.NotAfter.UTC().Format(time.RFC3339)
			}
			if inv.Previous != nil {
				prev, prevAfter = short(inv.Previous.Fingerprint), inv.Previous.NotAfter.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", inv.Role, cur, curAfter, prev, prevAfter)
		}
	}
	_ = tw.Flush()
}

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
		Args:  cobra.ExactArgs(1),
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
