// Command e2e-cluster brings the e2e suite's cluster up and keeps it up
// until Ctrl-C, for poking at it by hand (e2e/README.md):
//
//	go run ./e2e/cmd/e2e-cluster up     # then: bin/e2e/kubectl --kubeconfig /var/lib/virtlauncher-e2e/admin.kubeconfig ...
//	go run ./e2e/cmd/e2e-cluster down   # clean up what a killed run left
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/virtlauncher/virtlauncher/e2e/suite"
)

func main() {
	if len(os.Args) != 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: e2e-cluster up|down")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := log.New(os.Stderr, "e2e-cluster: ", log.Ltime).Printf
	if os.Args[1] == "down" {
		if err := suite.CleanUp(ctx, logf); err != nil {
			log.Fatal(err)
		}
		return
	}
	env, err := suite.Up(ctx, logf)
	if err != nil {
		log.Fatal(err)
	}
	gi, err := env.PushTestGuest(ctx)
	if err != nil {
		logf("test guest images: %v", err)
	} else {
		logf("test guest images: containerdisk %s, kernelBoot container %s", gi.Disk, gi.Kernel)
	}
	logf("cluster up: kubectl --kubeconfig %s; Ctrl-C takes it down", env.Cluster.Kubeconfig)
	<-ctx.Done()
	if err := env.Down(context.WithoutCancel(ctx)); err != nil {
		log.Fatal(err)
	}
}
