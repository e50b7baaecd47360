package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/standalone"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// newRmCmd is vlctl rm: what a VM's runs left (a background run's
// directory, records of runs that could not clean up) and, with
// --volumes, its volumes in the volume store.
func newRmCmd() *cobra.Command {
	var n nameFlags
	var volumes, force bool
	var store string
	var gcTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove what a stopped VM's runs left (a background run's log, stale records) and, with --volumes, its volumes",
		Long: `rm removes what the runs of a VM left: the directory of its background run (vlctl run -d:
its log and state), and what a run killed before it cleaned up left (vlctl gc's work: its
processes, network namespaces, ACL entries, work dir and record). With --volumes it removes the
VM's volumes in the volume store too (--volume-store: NAMESPACE/NAME/, the DataVolumes that no
--volume mapped); files given with --volume are never touched.

A running VM is refused unless --force, which stops it first as vlctl stop does (ACPI shutdown,
destroyed when its grace period ends). NAME is NAMESPACE/NAME, or NAME alone when only one
namespace has a VM of that name.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if os.Geteuid() != 0 {
				return errors.New("rm needs root, as vlctl run does: run it with sudo")
			}
			ns, name, err := rmTarget(&n, args[0], volumes, store)
			if err != nil {
				return err
			}
			full := ns + "/" + name
			if err := stopForRm(cmd, &n, ns, name, force); err != nil {
				return err
			}
			// What runs killed before left, this VM's among them.
			if err := standalone.GC(n.recordDir, gcTimeout, cmd.ErrOrStderr()); err != nil {
				return fmt.Errorf("%s: %w", full, err)
			}
			entries, err := runrecord.List(n.recordDir)
			if err != nil {
				return err
			}
			for _, e := range entries {
				if e.Name == name && e.Namespace == ns {
					return fmt.Errorf("%s: the record %s is still there (vlctl gc said why above)", full, e.Path)
				}
			}
			var done []string
			bgs, err := runrecord.ListBackground(n.recordDir)
			if err != nil {
				return err
			}
			if b, _ := runrecord.MatchBackground(bgs, full, ""); b != nil {
				if err := runrecord.RemoveBackground(b); err != nil {
					return err
				}
				done = append(done, "its background run")
			}
			if volumes {
				removed, err := userstorage.RemoveVolumes(store, n.recordDir, ns, name)
				for _, f := range removed {
					fmt.Fprintf(cmd.ErrOrStderr(), "vlctl: removed %s\n", f)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", full, err)
				}
				done = append(done, fmt.Sprintf("%d files of its volumes", len(removed)))
			}
			if len(done) == 0 {
				done = append(done, "nothing was left")
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "vlctl: removed %s: %s\n", full, strings.Join(done, ", "))
			return nil
		},
	}
	n.register(cmd)
	cmd.Flags().BoolVar(&volumes, "volumes", false, "remove the VM's volumes in the volume store too (never a --volume file)")
	cmd.Flags().BoolVar(&force, "force", false, "stop the VM first if it runs, as vlctl stop does")
	cmd.Flags().StringVar(&store, "volume-store", userstorage.DefaultVolumeStore, "the volume store (the --volume-store of vlctl run)")
	cmd.Flags().DurationVar(&gcTimeout, "timeout", 30*time.Second, "how long a killed run's processes get between SIGTERM and SIGKILL (as vlctl gc's)")
	return cmd
}

// rmTarget finds the namespace and name of the VM query names among the
// runs, background runs and (with volumes) the volume store.
func rmTarget(n *nameFlags, query string, volumes bool, store string) (string, string, error) {
	ns, name := n.namespace, query
	if q, nm, ok := strings.Cut(query, "/"); ok {
		if ns != "" && ns != q {
			return "", "", fmt.Errorf("%q names namespace %s, --namespace says %s", query, q, ns)
		}
		ns, name = q, nm
	}
	if name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%q: give NAME or NAMESPACE/NAME", query)
	}
	var found []string
	add := func(n string) {
		if (ns == "" || n == ns) && !slices.Contains(found, n) {
			found = append(found, n)
		}
	}
	entries, lerr := runrecord.List(n.recordDir)
	for _, e := range entries {
		if e.Name == name {
			add(e.Namespace)
		}
	}
	bgs, berr := runrecord.ListBackground(n.recordDir)
	for _, b := range bgs {
		if b.Name == name {
			add(b.Namespace)
		}
	}
	var serr error
	if volumes {
		var nss []string
		nss, serr = userstorage.StoreNamespaces(store, name)
		for _, s := range nss {
			add(s)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], name, nil
	case len(found) > 1:
		return "", "", fmt.Errorf("%q is ambiguous: namespaces %s have a VM of that name; give NAMESPACE/NAME or --namespace", query, strings.Join(found, ", "))
	}
	what := "no run, background run"
	if volumes {
		what += " or volumes"
	}
	return "", "", errors.Join(fmt.Errorf("%q: nothing to remove (%s of that name)", query, what), lerr, berr, serr)
}

// stopForRm refuses a running VM unless force, and then stops it: its
// live runs as vlctl stop does, and a background run's supervisor
// between two boots or still starting.
func stopForRm(cmd *cobra.Command, n *nameFlags, ns, name string, force bool) error {
	full := ns + "/" + name
	entries, err := runrecord.List(n.recordDir)
	if err != nil {
		return err
	}
	var live []*runrecord.Entry
	for i := range entries {
		if e := &entries[i]; e.Name == name && e.Namespace == ns && !e.Stale {
			live = append(live, e)
		}
	}
	bgs, err := runrecord.ListBackground(n.recordDir)
	if err != nil {
		return err
	}
	if b, _ := runrecord.MatchBackground(bgs, full, ""); b != nil && b.Running && len(live) == 0 {
		// Its supervisor, with no run recorded (starting, or waiting
		// to boot the guest again).
		live = append(live, &runrecord.Entry{Record: runrecord.Record{Name: name, Namespace: ns, Process: runrecord.Process{PID: b.PID, PIDStart: b.PIDStart}}})
	}
	if len(live) == 0 {
		return nil
	}
	if !force {
		return fmt.Errorf("%s is running (vlctl run pid %d): vlctl stop %s first, or vlctl rm --force", full, live[0].PID, full)
	}
	for _, e := range live {
		// The run's own limits, as vlctl stop has them.
		timeout := time.Duration(vmi.GracePeriodSeconds(e.VMI))*time.Second + 2*time.Minute
		fmt.Fprintf(cmd.ErrOrStderr(), "vlctl: stopping %s (vlctl run pid %d)\n", full, e.PID)
		if err := signalRun(e, syscall.SIGTERM, timeout); err != nil {
			return err
		}
	}
	return nil
}
