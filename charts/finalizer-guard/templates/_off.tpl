{{/*
What the values leave off, for NOTES.txt: each feature, the value that turns
it on, and what that costs, a paragraph each. A default install leaves
nothing off without saying so.
*/}}
{{- define "finalizer-guard.off" -}}
{{- $ns := .Release.Namespace }}
{{- $selector := printf "app.kubernetes.io/instance=%s,app.kubernetes.io/component=webhook" .Release.Name }}
{{- $failurePolicy := include "finalizer-guard.failurePolicy" . }}
{{- $clientCA := include "finalizer-guard.clientCA" . }}
{{- $policy := .Values.policy | default dict }}
{{- $oncall := .Values.oncallRole | default dict }}
{{- $m := .Values.monitoring | default dict }}
{{- $events := .Values.events | default dict }}
{{- $watch := .Values.watch | default dict }}

{{- if not (dig "enabled" true $events) }}

- Events: none on denied or overridden objects (events.enabled=false); the
  audit records say the same. On: events.enabled=true (the pods then mount a
  token that may create and patch Events).
{{- else if not (include "finalizer-guard.eventsWritten" .) }}

- Events: none yet. The webhook writes Events (FinalizerRemovalDenied,
  FinalizerOverride) only for reviews from a caller it trusts, and with
  these values it trusts none: finalizer_guard_events_total{decision="unauthenticated"}
  counts those skipped. Denials and overrides are in the audit records (the
  pods' logs: kubectl -n {{ $ns }} logs -l {{ $selector }} --tail=-1 | grep '"decision":"denied"')
  {{- if and (dig "enabled" true $watch) (dig "events" true $watch) }},
  and objects left stuck get watch's FinalizerStuck Events{{ end }}. On: on EKS, GKE
  or AKS, managed.platform=eks|gke|aks with where its kube-apiserver calls
  from (networkPolicy.webhookFrom, or managed.konnectivity=true on GKE and
  AKS; a NetworkPolicy then admits the webhook port from there alone:
  docs/security.md, "Managed control planes"). Where you run kube-apiserver:
  extraArgs --client-ca=/etc/finalizer-guard/tls/ca.crt once it presents a
  client certificate (docs/security.md). events.unauthenticated=true
  alone lets whoever reaches the webhook port write Events about any object.
{{- end }}
{{- if not $clientCA }}

- Evidence for `policy suggest` from the webhook's own records: without
  --client-ca they are unauthenticated, and suggest takes them only where
  kube-apiserver's audit log confirms them, or with --trust-unauthenticated.
  On: extraArgs --client-ca=... (as above).
{{- end }}
{{- if not (dig "enabled" true $watch) }}

- watch: objects stuck on finalizers are not counted, and get no
  FinalizerStuck Event or alert (watch.enabled=false). On: watch.enabled=true
  (one pod that reads every type but Secrets, metadata only where it can).
{{- else if not (dig "events" true $watch) }}

- FinalizerStuck Events: none (watch.events=false); watch still counts stuck
  objects in its metrics. On: watch.events=true (watch may then create and
  patch Events).
{{- end }}
{{- if not (dig "prometheusRule" "enabled" false $m) }}

- Alerts: none (monitoring.prometheusRule.enabled=false). On:
  monitoring.prometheusRule.enabled=true, and monitoring.serviceMonitor.enabled
  or podMonitor.enabled for the scrapes (needs the Prometheus Operator's CRDs).
{{- else if not (or (dig "serviceMonitor" "enabled" false $m) (dig "podMonitor" "enabled" false $m)) }}

- Scrapes for the alerts: no ServiceMonitor or PodMonitor (your Prometheus
  must scrape the pods by other means). On: monitoring.serviceMonitor.enabled=true
  or monitoring.podMonitor.enabled=true.
{{- end }}
{{- if and (not (dig "enabled" false (.Values.networkPolicy | default dict))) (not .Values.hostNetwork) (not (include "finalizer-guard.managedSources" .)) }}

- A NetworkPolicy: none, so anything in the cluster can reach the webhook
  port and post reviews (networkPolicy.enabled=false). On:
  networkPolicy.enabled=true, with webhookFrom naming where kube-apiserver
  calls from (needs a network plugin that enforces NetworkPolicy).
{{- end }}
{{- if not (include "finalizer-guard.backstop" .) }}

- The backstop: none, so the guard holds only while a webhook pod serves;
  meanwhile the removals it judges are
  {{- if eq $failurePolicy "Fail" }} refused (failurePolicy Fail)
  {{- else }} let through unjudged (failurePolicy Ignore){{ end }}
  (backstop.enabled=false). On: backstop.enabled=true with the policy's
  export (values.yaml, backstop; Kubernetes 1.30 or later; every guarded
  write is then judged twice, and a denial leaves no webhook Event).
{{- end }}
{{- if not (include "finalizer-guard.policyCheck" .) }}

- The policy check: none, so a policy the server refuses reaches the pods,
  which keep serving the last good one (policyCheck.enabled=false). On:
  policyCheck.enabled=true (a hook Job on the release's image).
{{- end }}
{{- if not (dig "enabled" true $oncall) }}

- The on-call role: not rendered (oncallRole.enabled=false). On:
  oncallRole.enabled=true (a ClusterRole bound to no one).
{{- else if not (hasKey $oncall "releasableResources") }}

- Releasing for on-call: the on-call role may read but release nothing, as
  oncallRole.releasableResources is not set (values reused from a chart
  before it). On: helm upgrade --reset-then-reuse-values, which takes the
  chart's list (Kubernetes' own finalizer holders and the presets' types),
  or set oncallRole.releasableResources.
{{- else if not $oncall.secrets }}

- Secrets for on-call: the on-call role neither reads nor releases Secrets,
  so `doctor --cluster` under it lists them UNREADABLE (oncallRole.secrets=false).
  On: oncallRole.secrets=true (get, list and patch on every Secret).
{{- end }}
{{- if not (dig "override" "approval" nil $policy) }}

- The two-person override: off, so one person who may update an object can
  release it with an approved reason (policy.override.approval unset). On:
  policy.override.approval with the approvers and maxAge (docs/policy.md).
{{- end }}
{{- end -}}
