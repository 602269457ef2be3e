{{- /*
Doc comments as Markdown. prose: a type's or package's comment, as paragraphs. cell: a comment in a table cell,
its paragraphs split by a blank line. Both escape what Markdown would take for HTML or emphasis.
*/ -}}
{{- define "prose" -}}
{{- . | trim | replace "<" "&lt;" | replace ">" "&gt;" | replace "*" "\\*" -}}
{{- end -}}

{{- define "cell" -}}
{{- . | trim | replace "<" "&lt;" | replace ">" "&gt;" | replace "*" "\\*" | replace "|" "\\|" | replace "\n\n" "<br /><br />" | replace "\n" " " -}}
{{- end -}}
