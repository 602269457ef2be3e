{{/*
Name of the chart, or nameOverride.
*/}}
{{- define "carousel.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: fullnameOverride, else the release name when it already contains the
chart name, else "<release>-<chart>". Truncated to 63 characters (the limit of a DNS label).
*/}}
{{- define "carousel.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"<chart>-<version>" for the helm.sh/chart label.
*/}}
{{- define "carousel.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels that select the manager's Pods.
*/}}
{{- define "carousel.selectorLabels" -}}
app.kubernetes.io/name: {{ include "carousel.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller-manager
{{- end }}

{{/*
Labels of every object. Call with (dict "ctx" $ "component" "<component>").
*/}}
{{- define "carousel.labels" -}}
{{- $ctx := .ctx -}}
helm.sh/chart: {{ include "carousel.chart" $ctx }}
app.kubernetes.io/name: {{ include "carousel.name" $ctx }}
app.kubernetes.io/instance: {{ $ctx.Release.Name }}
app.kubernetes.io/version: {{ $ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $ctx.Release.Service }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: carousel
{{- end }}

{{/*
Name of the ServiceAccount the manager runs as.
*/}}
{{- define "carousel.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "carousel.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create=false (the manager's ClusterRole would otherwise go to the namespace's default ServiceAccount)" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference of the manager; the tag defaults to the chart's appVersion.
*/}}
{{- define "carousel.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}

{{/*
Names of the webhook's Service, serving-certificate Secret and directory.
*/}}
{{- define "carousel.webhookServiceName" -}}
{{- printf "%s-webhook" (include "carousel.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The two modes keep the serving certificate in Secrets of different names: cert-manager keeps its Secret when
its Certificate is deleted, and a self-issuing manager refuses a Secret it did not create, so one name would
hold a switch from one mode to the other for ever.
*/}}
{{- define "carousel.webhookCertSecretName" -}}
{{- $suffix := ternary "webhook-tls" "webhook-cert" (and .Values.webhook.enabled .Values.webhook.certManager.enabled) }}
{{- /* Not cut at 63 characters, as a Service's name: a Secret's may have 253, and cut the two would be one. */}}
{{- printf "%s-%s" (include "carousel.fullname" .) $suffix }}
{{- end }}

{{/* The metrics Service, whose name is also the job of Carousel's series (the ServiceMonitor's). */}}
{{- define "carousel.metricsServiceName" -}}
{{- printf "%s-metrics" (include "carousel.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "carousel.webhookCertDir" -}}
/etc/carousel/webhook-certs
{{- end }}

{{- define "carousel.auditWebhookCADir" -}}
/etc/carousel/audit-webhook
{{- end }}

{{/*
Whether the manager serves its metrics with the webhook's serving certificate, which then also names the
metrics Service (carousel.servingDNSNames): secure metrics and a webhook. A scraper can then verify it against the
webhook's CA, and Prometheus' token goes only to the manager.
*/}}
{{- define "carousel.metricsVerifiable" -}}
{{- if and .Values.metrics.enabled .Values.metrics.secure .Values.webhook.enabled }}true{{ end }}
{{- end }}

{{/*
The names of the webhook's serving certificate: the webhook Service's, the metrics Service's when the manager
serves its metrics with it, and webhook.extraDNSNames.
*/}}
{{- define "carousel.servingDNSNames" -}}
{{ include "carousel.serviceDNSNames" (dict "ctx" . "svc" (include "carousel.webhookServiceName" .)) }}
{{- if include "carousel.metricsVerifiable" . }}
{{ include "carousel.serviceDNSNames" (dict "ctx" . "svc" (include "carousel.metricsServiceName" .)) }}
{{- end }}
{{- range .Values.webhook.extraDNSNames }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
Whether Carousel issues its own webhook certificate (webhook on, cert-manager off): "true" or "".
*/}}
{{- define "carousel.webhookSelfIssued" -}}
{{- if and .Values.webhook.enabled (not .Values.webhook.certManager.enabled) }}true{{ end }}
{{- end }}

{{/*
"true" when the name is an IP address (values.schema.json lets a name with ':' be only an IPv6 address), as Go's
net.ParseIP reads one; empty otherwise.
*/}}
{{- define "carousel.isIPAddress" -}}
{{- if or (contains ":" .) (regexMatch `^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$` .) }}true{{ end }}
{{- end }}

{{/*
Names of the webhook's serving certificate, as a list in YAML: the webhook Service's DNS names, then
webhook.extraDNSNames (DNS names or IP addresses).
*/}}
{{- define "carousel.webhookDNSNames" -}}
{{ include "carousel.serviceDNSNames" (dict "ctx" . "svc" (include "carousel.webhookServiceName" .)) }}
{{- range .Values.webhook.extraDNSNames }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* A Service's four names in the release's namespace, for (dict "ctx" $ "svc" NAME). */}}
{{- define "carousel.serviceDNSNames" -}}
{{- $ns := .ctx.Release.Namespace -}}
- {{ .svc }}
- {{ .svc }}.{{ $ns }}
- {{ .svc }}.{{ $ns }}.svc
- {{ .svc }}.{{ $ns }}.svc.cluster.local
{{- end }}

{{/*
A Go duration ("720h", "1h30m", "90s", "1.5h") in whole seconds, for PromQL. values.schema.json
guarantees the format.
*/}}
{{- define "carousel.durationSeconds" -}}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" (toString .) -1 }}
{{- $unit := regexFind "(ns|us|µs|ms|s|m|h)$" . }}
{{- $number := trimSuffix $unit . | float64 }}
{{- $total = addf $total (mulf $number (get $units $unit)) }}
{{- end }}
{{- printf "%.0f" $total }}
{{- end }}

{{/* The name of the ControllerRing the replicas are shards of. */}}
{{- define "carousel.controllerRing" -}}
{{- .Values.sharding.controllerRing | default (include "carousel.fullname" .) }}
{{- end }}

{{/*
Checks across values that values.schema.json cannot express.
*/}}
{{- define "carousel.validate" -}}
{{- $fullname := include "carousel.fullname" . }}
{{- if and .Values.webhook.enabled .Values.metrics.enabled (gt (len $fullname) 55) }}
{{- fail (printf "the name %q is %d characters: the Services add -webhook and -metrics to it, and a Service's name has at most 63, so that both would have the same name; choose a shorter release name or fullnameOverride" $fullname (len $fullname)) }}
{{- end }}
{{- $svc := include "carousel.webhookServiceName" . }}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $svc) }}
{{- fail (printf "the webhook Service name %q is not a DNS-1035 label: choose a release name or fullnameOverride that starts with a letter and has only lowercase letters, digits and '-'" $svc) }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) (not .Values.sharding.enabled) }}
{{- fail "replicaCount above 1 needs leaderElection.enabled=true or sharding.enabled=true: replicas without a leader would reconcile the same Clusters at once" }}
{{- end }}
{{- if and .Values.auditWebhook.enabled (not .Values.webhook.enabled) }}
{{- fail "auditWebhook.enabled=true needs webhook.enabled=true: the webhook server receives the audit events" }}
{{- end }}
{{- if and .Values.auditWebhook.enabled .Values.auditWebhook.url }}
{{- /* hostname drops an IPv6 address's brackets; IPv6 hex digits may be in either case. */}}
{{- $host := (urlParse .Values.auditWebhook.url).hostname | lower }}
{{- $names := include "carousel.webhookDNSNames" . | fromYamlArray }}
{{- if not (has $host ($names | join "," | lower | splitList ",")) }}
{{- fail (printf "auditWebhook.url names the host %q, which is not a name of the webhook's serving certificate (%s): the managed API servers would refuse it and send no audit events; add it to webhook.extraDNSNames, as written in the URL (an IP address goes into the certificate's IP addresses)" $host (join ", " $names)) }}
{{- end }}
{{- end }}
{{- if and .Values.sharding.enabled .Values.leaderElection.enabled }}
{{- fail "sharding.enabled=true replaces leader election: each replica holds a shard Lease; set leaderElection.enabled=false" }}
{{- end }}
{{- $ports := dict }}
{{- $_ := set $ports (toString .Values.health.port) "health.port" }}
{{- if .Values.metrics.enabled }}
{{- if hasKey $ports (toString .Values.metrics.port) }}
{{- fail (printf "metrics.port %v is already used by %s" .Values.metrics.port (get $ports (toString .Values.metrics.port))) }}
{{- end }}
{{- $_ := set $ports (toString .Values.metrics.port) "metrics.port" }}
{{- end }}
{{- if .Values.webhook.enabled }}
{{- if hasKey $ports (toString .Values.webhook.port) }}
{{- fail (printf "webhook.port %v is already used by %s" .Values.webhook.port (get $ports (toString .Values.webhook.port))) }}
{{- end }}
{{- end }}
{{- end }}
