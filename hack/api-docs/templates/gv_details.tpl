{{- /*
One API group: its package comment, its kinds, then the types they use, depth first in field order, so that
a type follows the first type that uses it. A kind is a type with +kubebuilder:object:root, or one no other type
refers to (the output kinds, which have no CRD); config.yaml leaves out the packages' other types.
*/ -}}
{{- define "gvDetails" -}}
{{- $gv := . -}}
{{- $seen := dict -}}
## `{{ $gv.GroupVersionString }}`

{{ template "prose" $gv.Doc }}
{{ range $gv.SortedTypes -}}
{{- if or .GVK (not .References) -}}
{{ template "walk" (dict "gv" $gv "type" . "seen" $seen "kind" true) }}
{{- end -}}
{{- end -}}
{{- range $gv.SortedTypes -}}
{{ template "walk" (dict "gv" $gv "type" . "seen" $seen "kind" false) }}
{{- end -}}
{{- end -}}

{{- /* kindLinks: the group's kinds, linked. */ -}}
{{- define "kindLinks" -}}
{{- $links := list -}}
{{- range .SortedTypes -}}
{{- if or .GVK (not .References) }}{{ $links = append $links (markdownRenderTypeLink .) }}{{ end -}}
{{- end -}}
{{- join ", " $links -}}
{{- end -}}

{{- /* walk renders a type not seen yet, then the group's types its fields use. */ -}}
{{- define "walk" -}}
{{- $gv := .gv -}}
{{- $seen := .seen -}}
{{- $t := .type -}}
{{- if not (hasKey $seen $t.Name) -}}
{{- $_ := set $seen $t.Name true -}}
{{ template "type" (dict "gv" $gv "type" $t "kind" .kind) }}
{{- range $t.Members -}}
{{- /* A pointer's or a slice's Name is its element's. */ -}}
{{- $used := index $gv.Types .Type.Name -}}
{{- if and $used (eq $used.Package .Type.Package) -}}
{{ template "walk" (dict "gv" $gv "type" $used "seen" $seen "kind" false) }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
