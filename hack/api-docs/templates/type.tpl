{{- /* One type: a struct's fields, or a string type's values. */ -}}
{{- define "type" -}}
{{- $gv := .gv -}}
{{- $t := .type }}
### {{ $t.Name }}
{{- with trim $t.Doc }}

{{ template "prose" . }}
{{- end }}

{{- if $t.Members }}

| Field | Type | Description |
| --- | --- | --- |
{{- if .kind }}
| `apiVersion` | string | `{{ $gv.GroupVersionString }}` |
| `kind` | string | `{{ $t.Name }}` |
{{- end }}
{{- range $t.Members }}
| `{{ .Name }}`{{ if has "Required: {}" .Validation }} (required){{ end }} | {{ template "fieldType" .Type }} | {{ template "fieldDoc" . }} |
{{- end }}
{{- else if $t.EnumValues }}
{{- $documented := false }}{{ range $t.EnumValues }}{{ if .Doc }}{{ $documented = true }}{{ end }}{{ end }}
{{- if $documented }}

| Value | Description |
| --- | --- |
{{- range $t.EnumValues }}
| `{{ .Name }}` | {{ template "cell" .Doc }} |
{{- end }}
{{- else }}

A string, one of {{ range $i, $v := $t.EnumValues }}{{ if $i }}, {{ end }}`{{ $v.Name }}`{{ end }}.
{{- end }}
{{- end }}
{{- if $t.References }}
{{- $refs := list }}{{ range $t.SortedReferences }}{{ $refs = append $refs (markdownRenderTypeLink .) }}{{ end }}

Used by {{ join ", " $refs }}.
{{- end }}
{{ end -}}

{{- /*
fieldType: a field's type, linked to its section or to the Kubernetes API reference. Kind is crd-ref-docs'
types.Kind: 4 a pointer, 5 a slice (the APIs have no maps).
*/ -}}
{{- define "fieldType" -}}
{{- $t := . -}}
{{- $meta := "k8s.io/apimachinery/pkg/apis/meta/v1" -}}
{{- if not $t -}}
{{- else if eq $t.Kind 5 -}}array of {{ template "fieldType" $t.UnderlyingType }}
{{- else if eq $t.Kind 4 -}}{{ template "fieldType" $t.UnderlyingType }}
{{- else if and (eq $t.Package $meta) (eq $t.Name "Time") -}}time
{{- else if and (eq $t.Package $meta) (eq $t.Name "Duration") -}}duration
{{- else if eq $t.Package "k8s.io/apimachinery/pkg/util/intstr" -}}integer or string
{{- else -}}{{ markdownRenderTypeLink $t }}
{{- end -}}
{{- end -}}

{{- /* fieldDoc: a field's comment, then its default and the schema's rules. */ -}}
{{- define "fieldDoc" -}}
{{- $f := . -}}
{{- $described := or (eq $f.Name "metadata") (trim $f.Doc) -}}
{{- if eq $f.Name "metadata" }}Standard object metadata.{{ else }}{{ template "cell" $f.Doc }}{{ end -}}
{{- $parts := list -}}
{{- if $f.Default }}{{ $parts = append $parts (printf "Default: `%s`." (regexReplaceAll "^\\{\\s*\\}$" $f.Default "{}")) }}{{ end -}}
{{- range $f.Validation -}}
{{- $kv := splitn ": " 2 . -}}
{{- $name := $kv._0 -}}
{{- $value := $kv._1 -}}
{{- if has $name (list "Required" "Optional" "XIntOrString") -}}
{{- else if eq $name "Enum" -}}
{{- $values := list }}{{ range splitList " " ($value | trimPrefix "[" | trimSuffix "]") }}{{ $values = append $values (printf "`%s`" .) }}{{ end -}}
{{- $parts = append $parts (printf "One of %s." (join ", " $values)) -}}
{{- else if eq $name "Pattern" }}{{ $parts = append $parts (printf "Matches %s." ($value | replace "|" "\\|")) -}}
{{- else if eq $name "MinLength" }}{{ $parts = append $parts (printf "Minimum length %s." $value) -}}
{{- else if eq $name "MaxLength" }}{{ $parts = append $parts (printf "Maximum length %s." $value) -}}
{{- else if eq $name "MinItems" }}{{ $parts = append $parts (printf "At least %s items." $value) -}}
{{- else if eq $name "MaxItems" }}{{ $parts = append $parts (printf "At most %s items." $value) -}}
{{- else }}{{ $parts = append $parts (printf "%s: %s." $name ($value | replace "|" "\\|")) -}}
{{- end -}}
{{- end -}}
{{- with index $f.Markers "listType" -}}
{{- $listType := printf "%v" (first .) -}}
{{- if eq $listType "set" }}{{ $parts = append $parts "No duplicates." }}{{ end -}}
{{- if eq $listType "map" -}}
{{- $keys := list }}{{ range index $f.Markers "listMapKey" }}{{ $keys = append $keys (printf "`%v`" .) }}{{ end -}}
{{- $parts = append $parts (printf "Unique by %s." (join " and " $keys)) -}}
{{- end -}}
{{- end -}}
{{- if $parts }}{{ if $described }}<br />{{ end }}{{ join "<br />" $parts }}{{ end -}}
{{- end -}}
