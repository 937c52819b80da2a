{{/*
The chart's name as objects and labels carry it: nameOverride, else
finalizer-guard.
*/}}
{{- define "finalizer-guard.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The name every object carries: fullnameOverride when given; else the release
name when it already says the chart's name (`helm install finalizer-guard
...`: the names of manifests/), else RELEASE-NAME. Cluster-scoped objects
(the webhook configuration, the ClusterRoles and their bindings) carry it
too, so two releases never fight over one. At most 52 characters: the
longest suffix (-policy-check, -critical-pods) still fits 63.
*/}}
{{- define "finalizer-guard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "finalizer-guard.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
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

{{/* The labels the chart sets on every object, which no value replaces. */}}
{{- define "finalizer-guard.standardLabels" -}}
app.kubernetes.io/name: {{ include "finalizer-guard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Labels of a map, as YAML lines, without the chart's own keys. */}}
{{- define "finalizer-guard.extraLabels" -}}
{{- range $k, $v := omit . "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/version" "app.kubernetes.io/managed-by" "helm.sh/chart" "app.kubernetes.io/component" }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/*
Labels of every object: `kubectl get -l app.kubernetes.io/instance=RELEASE`
finds them all (docs/install.md, uninstalling). commonLabels are added;
they never replace the chart's own.
*/}}
{{- define "finalizer-guard.labels" -}}
{{- with include "finalizer-guard.extraLabels" (.Values.commonLabels | default dict) | trim }}{{ . }}{{ "\n" }}{{ end -}}
{{ include "finalizer-guard.standardLabels" . }}
{{- end -}}

{{/*
A pod's labels: commonLabels, podLabels and the component's own (watch.podLabels
for watch's pod), each winning over the one before, then the chart's own and
its component. Argument: (list $ COMPONENT [COMPONENT_LABELS]).
*/}}
{{- define "finalizer-guard.podLabels" -}}
{{- $ := index . 0 -}}
{{- $own := dict -}}
{{- if gt (len .) 2 }}{{ $own = index . 2 | default dict }}{{ end -}}
{{- $extra := merge (deepCopy $own) (deepCopy ($.Values.podLabels | default dict)) ($.Values.commonLabels | default dict) -}}
{{- with include "finalizer-guard.extraLabels" $extra | trim }}{{ . }}{{ "\n" }}{{ end -}}
{{ include "finalizer-guard.standardLabels" $ }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* The webhook pods, as the Deployment, Service and PodDisruptionBudget select them. */}}
{{- define "finalizer-guard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "finalizer-guard.name" . }}
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

{{/*
The image's repository: image.repository, with global.imageRegistry (a
parent chart's, or a fleet's mirror) in place of the registry it names, or
before it when it names none (`finalizer-guard`). A first part with a dot or
a colon, or `localhost`, is a registry, as Docker reads an image reference.
*/}}
{{- define "finalizer-guard.imageRepository" -}}
{{- $repo := .Values.image.repository -}}
{{- with dig "imageRegistry" "" (.Values.global | default dict) -}}
{{- $parts := splitList "/" $repo -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $repo = rest $parts | join "/" -}}
{{- end -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo -}}
{{- end -}}
{{- $repo -}}
{{- end -}}

{{/* The image the webhook's pods and the policy check run: one binary. */}}
{{- define "finalizer-guard.image" -}}
{{- $ref := printf "%s:%s" (include "finalizer-guard.imageRepository" .) (.Values.image.tag | default .Chart.AppVersion) -}}
{{- with .Values.image.digest }}{{ $ref = printf "%s@%s" $ref . }}{{ end -}}
{{- $ref | quote -}}
{{- end -}}

{{/*
A securityContext, its usual fields in the order people read them, then any
other field the value gives; a field set to null (`runAsUser: null`) is left
out. Argument: (list CONTEXT).
*/}}
{{- define "finalizer-guard.securityContext" -}}
{{- $ctx := index . 0 | default dict -}}
{{- $order := list "runAsNonRoot" "runAsUser" "runAsGroup" "fsGroup" "allowPrivilegeEscalation" "readOnlyRootFilesystem" "capabilities" "seccompProfile" -}}
{{- range $order }}
{{- $v := index $ctx . }}
{{- if not (kindIs "invalid" $v) }}
{{- if eq . "fsGroup" }}
# Group owner of the mounted Secret's files, which are not world-readable.
{{- end }}
{{- if eq . "capabilities" }}
capabilities:
{{- range $k, $names := $v }}
  {{ $k }}: [{{ join ", " $names }}]
{{- end }}
{{- else }}
{{ toYaml (dict . $v) }}
{{- end }}
{{- end }}
{{- end }}
{{- with omit $ctx "runAsNonRoot" "runAsUser" "runAsGroup" "fsGroup" "allowPrivilegeEscalation" "readOnlyRootFilesystem" "capabilities" "seccompProfile" }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The pod's securityContext, for the webhook's, watch's and the policy check's
pods: podSecurityContext, by default a non-root user and the runtime's
default seccomp profile (the restricted Pod Security Standard).
*/}}
{{- define "finalizer-guard.podSecurityContext" -}}
{{- /* values.yaml's, for values reused from a chart before them (helm upgrade --reuse-values). */}}
{{- $ctx := dict "runAsNonRoot" true "runAsUser" 65532 "runAsGroup" 65532 "fsGroup" 65532 "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- if hasKey .Values "podSecurityContext" }}{{ $ctx = .Values.podSecurityContext }}{{ end -}}
{{- include "finalizer-guard.securityContext" (list $ctx) | trim -}}
{{- end -}}

{{/*
The container's securityContext: securityContext, by default nothing to
escalate to, nothing to write.
*/}}
{{- define "finalizer-guard.containerSecurityContext" -}}
{{- /* values.yaml's, for values reused from a chart before them. */}}
{{- $ctx := dict "runAsNonRoot" true "runAsUser" 65532 "runAsGroup" 65532 "allowPrivilegeEscalation" false "readOnlyRootFilesystem" true "capabilities" (dict "drop" (list "ALL")) "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- if hasKey .Values "securityContext" }}{{ $ctx = .Values.securityContext }}{{ end -}}
{{- include "finalizer-guard.securityContext" (list $ctx) | trim -}}
{{- end -}}

{{/* Whether the policy check runs before install and upgrade (policy-check.yaml). */}}
{{- define "finalizer-guard.policyCheck" -}}
{{- if dig "enabled" true (.Values.policyCheck | default dict) }}true{{ end -}}
{{- end -}}

{{/* `watch`'s pod, as its Deployment, Service and PodMonitor select it. */}}
{{- define "finalizer-guard.watchSelectorLabels" -}}
app.kubernetes.io/name: {{ include "finalizer-guard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: watch
{{- end -}}

{{/*
The webhook container's port: webhook.port, else 8443, or 10260 in the host
network (off the kubelet's 10250). Refused when it is the admin port (one
socket cannot be both), or the kubelet's port in the host network.
*/}}
{{- define "finalizer-guard.webhookPort" -}}
{{- $admin := int (.Values.adminPort | default 9090) -}}
{{- $port := int (dig "port" 0 (.Values.webhook | default dict)) -}}
{{- if not $port -}}
{{- $port = ternary 10260 8443 (.Values.hostNetwork | default false) -}}
{{- end -}}
{{- if eq $port $admin -}}
{{- fail (printf "webhook.port (%d) is adminPort (%d): the webhook (TLS) and the admin port (/metrics, probes) need a port each; change one of them" $port $admin) -}}
{{- end -}}
{{- if and .Values.hostNetwork (eq $port 10250) -}}
{{- fail (printf "webhook.port (%d) with hostNetwork is the kubelet's port on every node: choose another (the default in the host network is 10260)" $port) -}}
{{- end -}}
{{- $port -}}
{{- end -}}

{{/* The admin port: adminPort, else 9090. */}}
{{- define "finalizer-guard.adminPort" -}}
{{- int (.Values.adminPort | default 9090) -}}
{{- end -}}

{{/*
A webhook selector: the chart's own terms (none today: every namespace, every
object) followed by webhook.namespaceSelector's or objectSelector's, so a
value can narrow what is sent but never drop the chart's terms. Argument:
(list CHART_SELECTOR VALUE_SELECTOR).
*/}}
{{- define "finalizer-guard.selector" -}}
{{- $own := index . 0 | default dict -}}
{{- $extra := index . 1 | default dict -}}
{{- $labels := merge (deepCopy ($own.matchLabels | default dict)) ($extra.matchLabels | default dict) -}}
{{- $exprs := concat ($own.matchExpressions | default list) ($extra.matchExpressions | default list) -}}
{{- $out := dict -}}
{{- with $labels }}{{ $_ := set $out "matchLabels" . }}{{ end -}}
{{- with $exprs }}{{ $_ := set $out "matchExpressions" . }}{{ end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
The core group's types that can be listed and watched, but Secrets: RBAC
cannot take one type out of "*", so reading every type but Secrets names
them (watch's and the on-call role's reads).
*/}}
{{- define "finalizer-guard.coreTypesButSecrets" -}}
- configmaps
- endpoints
- events
- limitranges
- namespaces
- nodes
- persistentvolumeclaims
- persistentvolumes
- pods
- podtemplates
- replicationcontrollers
- resourcequotas
- serviceaccounts
- services
{{- end -}}

{{/* Kubernetes' own API groups: none serves a Secret. */}}
{{- define "finalizer-guard.kubernetesGroups" -}}
- admissionregistration.k8s.io
- apiextensions.k8s.io
- apiregistration.k8s.io
- apps
- autoscaling
- batch
- certificates.k8s.io
- coordination.k8s.io
- discovery.k8s.io
- events.k8s.io
- flowcontrol.apiserver.k8s.io
- internal.apiserver.k8s.io
- networking.k8s.io
- node.k8s.io
- policy
- rbac.authorization.k8s.io
- resource.k8s.io
- scheduling.k8s.io
- storage.k8s.io
- storagemigration.k8s.io
{{- end -}}

{{/*
Whether the webhook verifies its callers: `serve --client-ca` given through
extraArgs or extraEnv (docs/security.md, "Only kube-apiserver may call").
Reviews are authenticated only then: Events, and the evidence `policy
suggest` takes from the webhook's own records, depend on it.
*/}}
{{- define "finalizer-guard.clientCA" -}}
{{- range .Values.extraArgs }}{{ if hasPrefix "--client-ca" (toString .) }}true{{ end }}{{ end -}}
{{- range .Values.extraEnv }}{{ if eq (toString .name) "FINALIZER_GUARD_CLIENT_CA" }}true{{ end }}{{ end -}}
{{- end -}}
