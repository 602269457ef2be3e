package main

import (
	"bytes"
	"fmt"
	"text/template"
)

// pluginName is the plugin's name in krew: `kubectl krew install carousel`
// installs kubectl-carousel, which kubectl runs as `kubectl carousel`.
const pluginName = "carousel"

// The plugin's texts in its krew manifest. krew shows the short description
// in `kubectl krew search`, the description in `kubectl krew info` and the
// caveats after an install.
const (
	shortDescription = "Rotate the CAs of clusters that Carousel manages"
	description      = `Drives Carousel, the operator that owns and rotates the certificate
authorities of the Kubernetes clusters it manages, from the management
cluster: starts and completes the two phases of a cluster's CA rotation
(now or in its maintenance window) and follows them, shows a rotation's
status and, before it starts, its plan; lists every certificate's expiry;
prints short-lived admin kubeconfigs; and uploads, downloads and restores
an encrypted copy of a cluster's CA keys.
`
	caveats = `kubectl carousel works on the management cluster, where the Carousel
operator runs and the Clusters (carousel.dev/v1alpha1) are: use that
cluster's kubeconfig or --context. It needs read access to the Clusters
and their Secrets; the plugin's reference lists what each command needs.

Completion of its arguments (kubectl 1.26 and later, not on Windows):
copy kubectl_complete-carousel from the plugin's directory,
~/.krew/store/carousel/<version>/, to a directory on your PATH.
`
)

// manifestPlatform is one platform of the krew manifest.
type manifestPlatform struct {
	OS, Arch string
	URI      string
	SHA256   string
	Files    []string // what is copied from the archive into the plugin's directory: all of it
	Bin      string
}

// manifestTemplate is a krew Plugin (index/v1alpha2). Every value that is
// not one of the texts above is a name, a URL or a hex digest; the digest is
// quoted, since one made of digits alone would read as a number.
var manifestTemplate = template.Must(template.New(manifestFile).Funcs(template.FuncMap{"indent": indent}).Parse(`# The krew manifest of kubectl carousel {{.Tag}}, written by make release (hack/release).
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: {{.Name}}
spec:
  version: {{.Tag}}
  homepage: {{.Homepage}}
  shortDescription: {{.ShortDescription}}
  description: |
{{.Description | indent}}
  caveats: |
{{.Caveats | indent}}
  platforms:
{{- range .Platforms}}
  - selector:
      matchLabels:
        os: {{.OS}}
        arch: {{.Arch}}
    uri: {{.URI}}
    sha256: "{{.SHA256}}"
    files:
{{- range .Files}}
    - from: {{.}}
      to: .
{{- end}}
    bin: {{.Bin}}
{{- end}}
`))

// indent puts four spaces before every line of a text that ends in a
// newline, and drops that last newline.
func indent(text string) string {
	var b bytes.Buffer
	lines := bytes.SplitAfter([]byte(text), []byte("\n"))
	for _, line := range lines {
		if len(bytes.TrimSpace(line)) == 0 {
			b.Write(line)
			continue
		}
		b.WriteString("    ")
		b.Write(line)
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// krewManifest is the plugin's krew manifest for the plugin's archives among
// artifacts: one platform each, downloaded from the GitHub release of the
// version.
func krewManifest(c config, artifacts []artifact) ([]byte, error) {
	data := struct {
		Name, Tag, Homepage                    string
		ShortDescription, Description, Caveats string
		Platforms                              []manifestPlatform
	}{
		Name: pluginName, Tag: c.tag(), Homepage: c.Homepage,
		ShortDescription: shortDescription, Description: description, Caveats: caveats,
	}
	for _, a := range artifacts {
		if a.Component.Binary != pluginComponent.Binary {
			continue
		}
		var files []string
		for _, m := range a.Members {
			files = append(files, m.Name)
		}
		data.Platforms = append(data.Platforms, manifestPlatform{
			OS: a.Platform.OS, Arch: a.Platform.Arch,
			URI:    fmt.Sprintf("%s/%s/%s", c.DownloadBase, c.tag(), a.Name),
			SHA256: a.SHA256,
			Files:  files,
			Bin:    a.Binary,
		})
	}
	if len(data.Platforms) == 0 {
		return nil, fmt.Errorf("no archive of %s", pluginComponent.Binary)
	}
	var out bytes.Buffer
	if err := manifestTemplate.Execute(&out, data); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
