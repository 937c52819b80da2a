{{/*
The alerts of the PrometheusRule (monitoring.yaml), as rule groups: the same
text is unit-tested with `promtool test rules` (tests/monitoring/). Every
alert is scoped to the release's namespace, where its pods are scraped.
*/}}
{{- define "finalizer-guard.rules" -}}
{{- $fullname := include "finalizer-guard.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $r := .Values.monitoring.prometheusRule -}}
{{- $timeout := .Values.webhook.timeoutSeconds | default 5 -}}
{{- $webhook := "finalizers.finalizer-guard.io" -}}
{{- /* Each alert's runbook: its section of docs/runbook.md, as at the chart's release. */}}
{{- $runbook := $r.runbookUrl | default (printf "https://github.com/finalizer-guard/finalizer-guard/blob/v%s/docs/runbook.md" .Chart.AppVersion) -}}
{{- /*
Who was denied or released: the webhook's audit records, JSON lines among
its pods' logs, whatever the values. Its Events only where these values
write them (a caller it trusts: --client-ca, events.unauthenticated, the
managed mode); otherwise the alerts say so, and never send on-call to
Events alone.
*/}}
{{- $records := printf "kubectl -n %s logs -l app.kubernetes.io/instance=%s,app.kubernetes.io/component=webhook --tail=-1" $ns .Release.Name -}}
{{- $eventsOn := include "finalizer-guard.eventsWritten" . -}}
{{- $noEvents := "With these values the webhook writes no Events (no caller it trusts, or events.enabled=false; NOTES.txt names the value that turns them on): read the audit records." -}}
{{- $denialEvents := ternary "The same, beside each object: kubectl get events -A --field-selector reason=FinalizerRemovalDenied." $noEvents (eq $eventsOn "true") -}}
{{- $overrideEvents := ternary "The same, beside each object: kubectl get events -A --field-selector reason=FinalizerOverride." $noEvents (eq $eventsOn "true") -}}
{{- $stuck := ternary " The objects it leaves Terminating: kubectl get events -A --field-selector reason=FinalizerStuck (finalizer-guard watch)." "" (and .Values.watch.enabled .Values.watch.events) -}}
- name: finalizer-guard.webhook
  rules:
    - alert: FinalizerGuardWebhookDown
      expr: sum by (namespace, container) (up{namespace="{{ $ns }}", container="finalizer-guard"}) == 0 or absent(up{namespace="{{ $ns }}", container="finalizer-guard"})
      for: 5m
      labels:
        severity: critical
      annotations:
        runbook_url: "{{ $runbook }}#finalizerguardwebhookdown"
        summary: "No finalizer-guard webhook pod in {{ $ns }} answers its scrapes."
        description: "With failurePolicy Fail, finalizer removals other than Kubernetes' own controllers' are refused until a pod serves; with Ignore, they go through unguarded. docs/troubleshooting.md."
    - alert: FinalizerGuardWebhookUnreachable
      expr: sum(rate(apiserver_admission_webhook_rejection_count{name="{{ $webhook }}", error_type="calling_webhook_error"}[5m])) > 0 or sum(rate(apiserver_admission_webhook_fail_open_count{name="{{ $webhook }}"}[5m])) > 0
      for: 5m
      labels:
        severity: critical
      annotations:
        runbook_url: "{{ $runbook }}#finalizerguardwebhookunreachable"
        summary: "kube-apiserver cannot call the finalizer-guard webhook."
        description: "kube-apiserver's calls to {{ $webhook }} fail (TLS, network, timeout): writes are refused (failurePolicy Fail) or let through unjudged (Ignore). docs/troubleshooting.md."
    - alert: FinalizerGuardReviewLatencyHigh
      expr: histogram_quantile(0.99, sum by (le) (rate(apiserver_admission_webhook_admission_duration_seconds_bucket{name="{{ $webhook }}"}[5m]))) > {{ mulf $timeout 0.8 }}
      for: 10m
      labels:
        severity: warning
      annotations:
        runbook_url: "{{ $runbook }}#finalizerguardreviewlatencyhigh"
        summary: "finalizer-guard reviews take {{`{{ $value | humanizeDuration }}`}} at the 99th percentile, near the webhook's {{ $timeout }}s timeout."
        description: "As kube-apiserver measures the call (network and TLS included; the webhook's own decision, finalizer_guard_review_duration_seconds, takes well under a millisecond). Past webhook.timeoutSeconds kube-apiserver gives up on the call and failurePolicy decides the write."
    - alert: FinalizerGuardDropped
      expr: sum by (pod, queue) (increase(finalizer_guard_dropped_total{namespace="{{ $ns }}"}[10m])) > 0
      labels:
        severity: warning
      annotations:
        runbook_url: "{{ $runbook }}#finalizerguarddropped"
        summary: "{{`{{ $labels.pod }}`}} dropped {{`{{ $value | humanize }}`}} {{`{{ $labels.queue }}`}} items in 10 minutes."
        description: "A background writer's queue was full, or its output failed: recordings or Events were lost, or (queue audit) the audit records of answered reviews were lost to a failed write to standard output (a closed pipe, a full disk; the pod logs their count and first and last uid, and refuses reviews until a write goes through). A review whose audit record cannot be queued is refused, not dropped (FinalizerGuardAuditStalled). The Events queue is --events-queue."
    - alert: FinalizerGuardAuditStalled
      expr: sum by (pod) (increase(finalizer_guard_audit_refused_reviews_total{namespace="{{ $ns }}"}[10m])) > 0
      labels:
        severity: critical
      annotations:
        runbook_url: "{{ $runbook }}#finalizerguardauditstalled"
        summary: "{{`{{ $labels.pod }}`}} refused {{`{{ $value | humanize }}`}} reviews in 10 minutes: its audit records are not being written."
        description: "Its standard output is not read (the log pipeline stalled) or cannot be written (a closed pipe, a full disk): a review waits at most 1s for its audit record to be taken, then is answered with an error, so writes are refused (failurePolicy Fail) or let through unjudged (Ignore), and /readyz says not ready. docs/troubleshooting.md."
    - alert: FinalizerGuardEventsFailing
      expr: sum by (pod) (increase(finalizer_guard_events_total{namespace="{{ $ns }}", decision="failed"}[10m])) > 0
      for: 10m
      labels:
        severity: warning
      annotations:
        runbook_url: "{{ $runbook }}#finalizerguardeventsfailing"
        summary: "{{`{{ $labels.pod }}`}} cannot write Kubernetes Events."
        description: "Event writes are refused or time out: check its logs and that its ClusterRole grants create and patch on events.k8s.io events."
    - alert: FinalizerGuardOverrideUsed
      expr: sum by (reason) (increase(finalizer_guard_overrides_total{namespace="{{ $ns }}"}[10m])) > 0
      labels:
        severity: info
      annotations:
        runbook_url: "{{ $runbook }}#finalizerguardoverrideused"
        summary: "A finalizer was removed by override ({{`{{ $labels.reason }}`}})."
        description: "Someone used the emergency override. Who, on what, with which detail, and what to clean up by hand (protected, the leak ledger): the webhook's audit records, {{ $records }} | grep '\"decision\":\"override\"' (or kube-apiserver's audit log). {{ $overrideEvents }}"
    - alert: FinalizerGuardDenialSurge
      expr: sum(rate(finalizer_guard_unauthorized_removals_total{namespace="{{ $ns }}", decision="denied"}[10m])) > {{ $r.denialsPerSecond }}
      for: 10m
      labels:
        severity: warning
      annotations:
        runbook_url: "{{ $runbook }}#finalizerguarddenialsurge"
        summary: "finalizer-guard denies {{`{{ $value | humanize }}`}} finalizer removals a second."
        description: "A controller the policy does not name is retrying, or someone is trying to strip finalizers. Who, and on what: the webhook's audit records, {{ $records }} | grep '\"decision\":\"denied\"' (or kube-apiserver's audit log, annotation finalizers.finalizer-guard.io/decision: denied). {{ $denialEvents }} finalizer-guard policy suggest writes the rules a controller needs."
    - alert: FinalizerGuardCertificateExpiring
      expr: min by (namespace, pod, kind) (finalizer_guard_certificate_expiry_timestamp_seconds{namespace="{{ $ns }}"} > 0) - time() < {{ mul (int ($r.certificateExpiryDays | default 14)) 86400 }}
      for: 1h
      labels:
        severity: warning
      annotations:
        runbook_url: "{{ $runbook }}#finalizerguardcertificateexpiring"
        summary: "{{`{{ $labels.pod }}`}}'s {{`{{ $labels.kind }}`}} certificate expires in {{`{{ $value | humanizeDuration }}`}}."
        description: "Once it expires kube-apiserver's calls fail TLS: writes are refused (failurePolicy Fail) or let through unjudged (Ignore). Renew it (docs/troubleshooting.md, certificate expiry); the pods pick a renewed Secret up without a restart."
    - alert: FinalizerGuardReloadFailing
      expr: sum by (namespace, pod, kind) (increase(finalizer_guard_reloads_total{namespace="{{ $ns }}", outcome="failure"}[10m])) > 0
      labels:
        severity: warning
      annotations:
        runbook_url: "{{ $runbook }}#finalizerguardreloadfailing"
        summary: "{{`{{ $labels.pod }}`}} refused a new {{`{{ $labels.kind }}`}}: it keeps serving the last good one."
        description: "A policy, certificate or client CA that the pod cannot take was mounted; the change is not in force. Its logs say why: kubectl -n {{ $ns }} logs {{`{{ $labels.pod }}`}}; finalizer-guard policy validate checks a policy (docs/troubleshooting.md)."
    - alert: FinalizerGuardServiceAccountDenied
      expr: sum by (namespace) (increase(finalizer_guard_denials_by_identity_total{namespace="{{ $ns }}", class="serviceaccount"}[10m])) > 0
      labels:
        severity: warning
      annotations:
        runbook_url: "{{ $runbook }}#finalizerguardserviceaccountdenied"
        summary: "finalizer-guard denied a ServiceAccount {{`{{ $value | humanize }}`}} finalizer removals in 10 minutes: a controller may be locked out."
        description: "A controller the policy does not name cannot remove its own finalizers, and the objects it finalizes stay Terminating. Its name: the webhook's audit records, {{ $records }} | grep '\"decision\":\"denied\"' (user system:serviceaccount:...). {{ $denialEvents }}{{ $stuck }} finalizer-guard policy suggest writes its rule."
    - alert: FinalizerGuardModeDrift
      expr: count by (cluster, namespace) (count by (cluster, namespace, mode) (finalizer_guard_policy_info{namespace="{{ $ns }}"})) > 1
      for: 15m
      labels:
        severity: warning
      annotations:
        runbook_url: "{{ $runbook }}#finalizerguardmodedrift"
        summary: "finalizer-guard's pods in {{ $ns }} serve policies of different modes."
        description: "Some replicas warn while others enforce, so whether a removal is denied depends on the pod that answers. finalizer_guard_policy_info{mode,sha256,source} says which pod serves what: a pod whose policy reload failed, or a rollout that did not finish."
{{- if .Values.watch.enabled }}
- name: finalizer-guard.watch
  rules:
    - alert: FinalizerGuardWatchDown
      expr: sum by (namespace, container) (up{namespace="{{ $ns }}", container="watch"}) == 0 or absent(up{namespace="{{ $ns }}", container="watch"})
      for: 10m
      labels:
        severity: warning
      annotations:
        runbook_url: "{{ $runbook }}#finalizerguardwatchdown"
        summary: "finalizer-guard watch in {{ $ns }} answers no scrape: objects stuck on finalizers go unnoticed."
        description: "kubectl -n {{ $ns }} logs deployment/{{ $fullname }}-watch."
    - alert: FinalizerStuck
      expr: max by (finalizer, resource) (finalizer_guard_stuck_objects{namespace="{{ $ns }}"}) > 0
      for: {{ $r.stuckFor }}
      labels:
        severity: warning
      annotations:
        runbook_url: "{{ $runbook }}#finalizerstuck"
        summary: "{{`{{ $value }}`}} {{`{{ $labels.resource }}`}} stuck on finalizer {{`{{ $labels.finalizer }}`}}."
        description: "Objects of {{`{{ $labels.resource }}`}} have been deleting with finalizer {{`{{ $labels.finalizer }}`}} for longer than watch's --stuck-after, for {{ $r.stuckFor }}. {{ if .Values.watch.events }}Each has a FinalizerStuck Event naming the owner and the command to run: kubectl get events -A --field-selector reason=FinalizerStuck.{{ else }}watch writes no FinalizerStuck Events (watch.events=false): finalizer-guard unstick -A explains each stuck object, its owner and the command to run.{{ end }}"
{{- end }}
{{- end -}}
