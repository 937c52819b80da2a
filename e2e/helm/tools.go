//go:build tools

// Package helm pins the Helm command the chart's tests run (helm lint,
// helm template, and install, upgrade and uninstall on the real control
// plane). A module of its own: Helm's Kubernetes libraries are a newer minor
// than the control plane's in ../go.mod, and one module cannot hold both.
// Nothing here is imported by the product; `build.sh` builds the command
// into a cache outside the repository.
package helm

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
