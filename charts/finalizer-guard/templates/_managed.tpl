{{/*
The managed mode (values.yaml, managed): the sources kube-apiserver calls
the webhook port from, as NetworkPolicy peers, checked against the
platform; empty when no platform is set. A platform without the source it
needs, or with a source that would admit more than its kube-apiserver,
fails the render, saying which.
*/}}
{{- define "finalizer-guard.managedSources" -}}
{{- $managed := .Values.managed | default dict -}}
{{- $platform := $managed.platform | default "" -}}
{{- if $platform -}}
{{- $name := get (dict "eks" "EKS" "gke" "GKE" "aks" "AKS") $platform -}}
{{- if .Values.hostNetwork -}}
{{- fail (printf "managed.platform=%s with hostNetwork: no NetworkPolicy applies to pods in the host network, so nothing would hold the webhook port to kube-apiserver; leave managed.platform empty, restrict the port with the nodes' firewall, and only then set events.unauthenticated=true (docs/security.md)" $platform) -}}
{{- end -}}
{{- $sources := list -}}
{{- range $i, $peer := (dig "webhookFrom" list (.Values.networkPolicy | default dict)) -}}
{{- $where := printf "networkPolicy.webhookFrom[%d]" $i -}}
{{- if hasKey $peer "ipBlock" -}}
{{- $cidr := dig "cidr" "" ($peer.ipBlock | default dict) | toString -}}
{{- if not $cidr -}}
{{- fail (printf "managed.platform=%s: %s.ipBlock has no cidr" $platform $where) -}}
{{- end -}}
{{- if hasSuffix "/0" $cidr -}}
{{- fail (printf "managed.platform=%s: %s.ipBlock.cidr %s is every address: name where %s's kube-apiserver calls from (docs/security.md, \"Managed control planes\")" $platform $where $cidr $name) -}}
{{- end -}}
{{- else if eq $platform "eks" -}}
{{- fail (printf "managed.platform=eks: %s is not an ipBlock: EKS's kube-apiserver calls webhooks from the control plane's network interfaces in the cluster's subnets, never from a pod; name those subnets (or the interfaces' addresses) as ipBlock CIDRs" $where) -}}
{{- else -}}
{{- $ns := $peer.namespaceSelector | default dict -}}
{{- $pods := $peer.podSelector | default dict -}}
{{- if or (and (empty $ns.matchLabels) (empty $ns.matchExpressions)) (and (empty $pods.matchLabels) (empty $pods.matchExpressions)) -}}
{{- fail (printf "managed.platform=%s: %s is neither an ipBlock nor a namespaceSelector with a podSelector, each naming labels: it would admit a whole namespace, every namespace or any pod; name the konnectivity agents (managed.konnectivity=true) or the control plane's range" $platform $where) -}}
{{- end -}}
{{- end -}}
{{- $sources = append $sources $peer -}}
{{- end -}}
{{- if $managed.konnectivity -}}
{{- if eq $platform "eks" -}}
{{- fail "managed.konnectivity with managed.platform=eks: EKS's control plane reaches pods through its network interfaces in the cluster's VPC, not through konnectivity agents; name the cluster's subnets in networkPolicy.webhookFrom" -}}
{{- end -}}
{{- $label := ternary "app" "k8s-app" (eq $platform "aks") -}}
{{- $sources = append $sources (dict "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" "kube-system")) "podSelector" (dict "matchLabels" (dict $label "konnectivity-agent"))) -}}
{{- end -}}
{{- if not $sources -}}
{{- if eq $platform "eks" -}}
{{- fail "managed.platform=eks needs networkPolicy.webhookFrom: ipBlock CIDRs of the subnets EKS put the control plane's network interfaces in (aws eks describe-cluster --query cluster.resourcesVpcConfig.subnetIds), e.g. --set-json 'networkPolicy.webhookFrom=[{\"ipBlock\":{\"cidr\":\"10.0.0.0/28\"}}]' (docs/security.md, \"Managed control planes\")" -}}
{{- else if eq $platform "gke" -}}
{{- fail "managed.platform=gke needs a source: networkPolicy.webhookFrom with the control plane's range as an ipBlock (a private cluster's masterIpv4CidrBlock: gcloud container clusters describe CLUSTER), or managed.konnectivity=true where the control plane reaches pods through konnectivity agents (docs/security.md, \"Managed control planes\")" -}}
{{- else -}}
{{- fail "managed.platform=aks needs a source: managed.konnectivity=true (the konnectivity-agent pods in kube-system, through which AKS's API server reaches pods), or with API Server VNet Integration the API server subnet as an ipBlock in networkPolicy.webhookFrom (docs/security.md, \"Managed control planes\")" -}}
{{- end -}}
{{- end -}}
{{- toYaml $sources -}}
{{- end -}}
{{- end -}}

{{/*
Whether Events are written for reviews without a verified client
certificate (`serve --events-unauthenticated`): on the operator's word
(events.unauthenticated), or in the managed mode, whose NetworkPolicy holds
the webhook port to kube-apiserver's sources.
*/}}
{{- define "finalizer-guard.eventsUnauthenticated" -}}
{{- if or (dig "unauthenticated" false (.Values.events | default dict)) (include "finalizer-guard.managedSources" .) }}true{{ end -}}
{{- end -}}

{{/*
Whether the webhook writes its Events (FinalizerRemovalDenied,
FinalizerOverride) with these values: on, and a caller it trusts (a
verified client certificate, or the above).
*/}}
{{- define "finalizer-guard.eventsWritten" -}}
{{- if and (dig "enabled" true (.Values.events | default dict)) (or (include "finalizer-guard.clientCA" .) (include "finalizer-guard.eventsUnauthenticated" .)) }}true{{ end -}}
{{- end -}}
