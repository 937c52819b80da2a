//go:build tools

// Package e2e pins the oldest Kubernetes release the end-to-end tests run
// (the matrix's oldest column, the oldest release the docs claim):
// kube-apiserver, kube-controller-manager, kubectl and etcd. Nothing here is
// imported by the product; `../build.sh v1.28` builds the commands below
// from this module into a cache outside the repository, beside the default
// module's.
package e2e

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
