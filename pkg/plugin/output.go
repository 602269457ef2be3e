package plugin

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"

	outputv1alpha1 "github.com/carousel-dev/carousel/apis/output/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// printScheme knows the kinds the commands print: the Cluster and the output kinds, so that the printers
// set apiVersion and kind.
var printScheme = func() *runtime.Scheme {
	s := scheme.New()
	utilruntime.Must(outputv1alpha1.AddToScheme(s))
	return s
}()

// output is the -o flag of a command with a human-readable form: empty for that form, otherwise one of
// cli-runtime's JSON and YAML printers (managed fields left out unless --show-managed-fields).
type output struct {
	format string
	flags  *genericclioptions.JSONYamlPrintFlags
	// printer prints what the command shows; nil for the human-readable form. Set before the command runs.
	printer printers.ResourcePrinter
}

func addOutputFlags(cmd *cobra.Command) *output {
	o := &output{flags: genericclioptions.NewJSONYamlPrintFlags()}
	cmd.Flags().StringVarP(&o.format, "output", "o", "", "Output format: "+strings.Join(o.flags.AllowedFormats(), "|")+"; the human-readable form when empty")
	o.flags.AddFlags(cmd)
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(o.flags.AllowedFormats(), cobra.ShellCompDirectiveNoFileComp))
	// A wrong format is refused before anything is read.
	cmd.PreRunE = func(*cobra.Command, []string) (err error) {
		o.printer, err = o.toPrinter()
		return err
	}
	return o
}

// toPrinter is the printer of the format; nil for the human-readable form.
func (o *output) toPrinter() (printers.ResourcePrinter, error) {
	if o.format == "" {
		return nil, nil
	}
	p, err := o.flags.ToPrinter(o.format)
	if err != nil {
		return nil, fmt.Errorf("--output %q: choose one of %s, or none for the human-readable form",
			o.format, strings.Join(o.flags.AllowedFormats(), ", "))
	}
	return printers.NewTypeSetter(printScheme).ToPrinter(p), nil
}
