//go:build tools

// Package e2e pins the newest Kubernetes release the end-to-end tests run
// (the control plane of the tamper-proof scenario, and the matrix's newest
// column): kube-apiserver, kube-controller-manager, kubectl and etcd. Nothing
// here is imported by the product; `../build.sh v1.37` builds the commands
// below from this module into a cache outside the repository, beside the
// default module's.
package e2e

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
