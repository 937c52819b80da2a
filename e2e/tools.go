//go:build tools

// Package e2e pins the upstream binaries the end-to-end tests run, from
// the newest Kubernetes release they run (v1.37.2): the real control plane
// (kube-apiserver, kube-controller-manager, kubectl, kube-scheduler), etcd,
// and the kubelet of the nodes (nodes.sh). The oldest release the docs
// claim is pinned beside it, in v1.28/. Nothing here is imported by the
// product; `build.sh` builds the commands below from this module into a
// cache outside the repository.
package e2e

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
