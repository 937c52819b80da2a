{{/*
The name every object carries: the release name when it already says
finalizer-guard (`helm install finalizer-guard ...`: the names of manifests/),
else RELEASE-finalizer-guard. Cluster-scoped objects (the webhook
configuration, the ClusterRole and its binding) carry it too, so two releases
never fight over one.
*/}}
{{- define "finalizer-guard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The Secret the pods mount: tls.crt, tls.key, and ca.crt beside them. */}}
{{- define "finalizer-guard.tlsSecret" -}}
{{- printf "%s-tls" (include "finalizer-guard.fullname" .) -}}
{{- end -}}

{{/* certificates.source self: the Secret the pods keep their CA and serving certificate in. */}}
{{- define "finalizer-guard.certificatesSecret" -}}
{{- printf "%s-certificates" (include "finalizer-guard.fullname" .) -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "finalizer-guard.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The webhook pods, as the Deployment, Service and PodDisruptionBudget select them. */}}
{{- define "finalizer-guard.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: webhook
{{- end -}}

{{/* The Service's DNS names, as `finalizer-guard certs` writes them. */}}
{{- define "finalizer-guard.serviceNames" -}}
{{- $svc := include "finalizer-guard.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson -}}
{{- end -}}

{{/*
The webhook's failurePolicy: webhook.failurePolicy when set, else what the
policy's mode calls for. Ignore while the policy only warns: a warn-mode
webhook denies nothing, so failing closed would add an outage's cost (writes
refused while no pod serves) and protect nothing. Fail once it enforces: an
unreachable webhook must not become a way around it. Ignore with the
backstop: the ValidatingAdmissionPolicy guards while the webhook cannot.
*/}}
{{- define "finalizer-guard.failurePolicy" -}}
{{- $mode := dig "mode" "enforce" .Values.policy -}}
{{- $fail := and (eq $mode "enforce") (not (include "finalizer-guard.backstop" .)) -}}
{{- dig "failurePolicy" "" (.Values.webhook | default dict) | default (ternary "Fail" "Ignore" $fail) -}}
{{- end -}}

{{/* Whether the ValidatingAdmissionPolicy backstop is installed (backstop.yaml). */}}
{{- define "finalizer-guard.backstop" -}}
{{- if dig "enabled" false (.Values.backstop | default dict) }}true{{ end -}}
{{- end -}}

{{/*
The policy file, as the ConfigMap the pods mount holds it and as the policy
check (policy-check.yaml) validates it: one rendering for both, so what was
checked is what the pods read.
*/}}
{{- define "finalizer-guard.policy" -}}
{{- toYaml .Values.policy -}}
{{- end -}}

{{/* The image the webhook's pods and the policy check run: one binary. */}}
{{- define "finalizer-guard.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- with .Values.image.digest }}{{ $ref = printf "%s@%s" $ref . }}{{ end -}}
{{- $ref | quote -}}
{{- end -}}

{{/*
The pod's securityContext, for the webhook's pods and the policy check's: a
non-root user, the runtime's default seccomp profile (the restricted Pod
Security Standard).
*/}}
{{- define "finalizer-guard.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
# Group owner of the mounted Secret's files, which are not world-readable.
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The container's securityContext: nothing to escalate to, nothing to write. */}}
{{- define "finalizer-guard.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Whether the policy check runs before install and upgrade (policy-check.yaml). */}}
{{- define "finalizer-guard.policyCheck" -}}
{{- if dig "enabled" true (.Values.policyCheck | default dict) }}true{{ end -}}
{{- end -}}

{{/* `watch`'s pod, as its Deployment, Service and PodMonitor select it. */}}
{{- define "finalizer-guard.watchSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: watch
{{- end -}}
