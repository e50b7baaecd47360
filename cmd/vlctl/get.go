package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// newGetCmd makes vlctl get: the launcher's Domain object, what
// virt-handler reads to set a VMI's status, by NAME or --socket.
func newGetCmd() *cobra.Command {
	var s socketFlags
	var n nameFlags
	var output string
	cmd := &cobra.Command{
		Use:   "get NAME | get --socket PATH",
		Short: "Print the launcher's Domain object (state and reason; -o json: KubeVirt's JSON)",
		Long: `get asks the VM's launcher for its Domain object, as virt-handler does to set the VMI's
status: a line with the VM's name, the libvirt domain's name, its state and the reason for it;
-o json prints the whole object as KubeVirt's Domain JSON (ObjectMeta, Spec: the domain,
Status: Status, Reason, Interfaces, OSInfo, FSFreezeStatus, ...), for scripts.

NAME is a VM that vlctl run runs on this machine (vlctl ps lists them): NAMESPACE/NAME, or
NAME alone when only one namespace has a VM of that name. --socket is a launcher's command
socket instead.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "table", "json"); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			c, err := dialNameOrSocket(ctx, "get", args, &s, &n)
			if err != nil {
				return err
			}
			defer c.Close()
			d, exists, err := c.GetDomain(ctx)
			if err != nil {
				return fmt.Errorf("get: %w", err)
			}
			if !exists {
				return errors.New("get: no domain is defined")
			}
			if output == "json" {
				return writeDomainJSON(cmd.OutOrStdout(), d)
			}
			writeDomain(cmd.OutOrStdout(), d)
			return nil
		},
	}
	registerNameOrSocket(cmd, &s, &n)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, or json: KubeVirt's Domain object (ObjectMeta, Spec, Status)")
	return cmd
}

// writeDomain prints the table of vlctl get: one row.
func writeDomain(w io.Writer, d *domainjson.Domain) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDOMAIN\tSTATUS\tREASON")
	name := d.Name
	if d.Namespace != "" {
		name = d.Namespace + "/" + name
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", dash(name), dash(d.Spec.Name), dash(d.Status.Status), dash(d.Status.Reason))
	tw.Flush()
}

// writeDomainJSON prints the Domain object, indented.
func writeDomainJSON(w io.Writer, d *domainjson.Domain) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
