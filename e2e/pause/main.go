// Command pause is the pod sandbox's process for the nodes of nodes.sh: it
// holds the pod's namespaces, reaps the orphans it inherits as PID 1, and
// exits on SIGTERM or SIGINT, as Kubernetes' own pause image does. It is
// built here because the nodes pull no image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-children:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
