package main

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/virtlauncher/virtlauncher/internal/runrecord"
)

// Shell completion (vlctl completion bash|zsh|fish|powershell, cobra's):
// the commands that take a VM's NAME complete it from the records of the
// runs on this machine, read as vlctl ps reads them, so only as root
// (sudo); as another user nothing is offered.

// nameArgs says how each command's NAME completes: ended adds the VM
// names of runs that ended but left something (vlctl rm and logs act on
// them), and files: the argument after NAME is a local file.
var nameArgs = map[string]struct {
	ended bool
	files bool
}{
	"stop": {}, "kill": {}, "pause": {}, "unpause": {}, "shutdown": {}, "sync": {}, "delete": {},
	"console": {}, "attach": {}, "ssh": {}, "exec": {}, "vnc": {}, "guestinfo": {}, "get": {},
	"addvolume": {}, "removevolume": {}, "addinterface": {}, "removeinterface": {},
	"screenshot":  {files: true},
	"memory-dump": {files: true},
	"logs":        {ended: true},
	"rm":          {ended: true},
}

// addCompletions gives the commands that take a VM's name their
// completion, and vlctl run --migrate-from its own.
func addCompletions(root *cobra.Command) {
	for _, c := range root.Commands() {
		if a, ok := nameArgs[c.Name()]; ok {
			c.ValidArgsFunction = completeName(a.ended, a.files)
		}
		switch c.Name() {
		case "cp":
			c.ValidArgsFunction = completeCp
		case "run":
			c.RegisterFlagCompletionFunc("migrate-from", func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return vmCompletions(cmd, toComplete, false, ""), cobra.ShellCompDirectiveNoFileComp
			})
		}
	}
}

// completeName completes the first argument, a VM's name; the ones after
// it complete to files, or with files false to nothing.
func completeName(ended, files bool) cobra.CompletionFunc {
	later := cobra.ShellCompDirectiveNoFileComp
	if files {
		later = cobra.ShellCompDirectiveDefault
	}
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		switch {
		case len(args) > 0:
			return nil, later
		case cmd.Name() == "console" && strings.HasPrefix(toComplete, "/"): // console SOCKET
			return nil, cobra.ShellCompDirectiveDefault
		}
		return vmCompletions(cmd, toComplete, ended, ""), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeCp completes vlctl cp's NAME:PATH ends: a word that begins a VM's
// name completes to NAME:, anything else to local files.
func completeCp(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) >= 2 || toComplete == "" || strings.ContainsAny(toComplete, ":.") || strings.HasPrefix(toComplete, "/") {
		return nil, cobra.ShellCompDirectiveDefault
	}
	if c := vmCompletions(cmd, toComplete, false, ":"); len(c) > 0 {
		return c, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	}
	return nil, cobra.ShellCompDirectiveDefault
}

// vmCompletions lists the VMs of the runs in the command's --record-dir
// (of --namespace, when given) that begin with toComplete, each followed
// by suffix: NAME when no other namespace has a VM of that name (the
// commands take it so), else NAMESPACE/NAME, and NAMESPACE/NAME whenever
// toComplete has a slash. The description says its namespace and state.
func vmCompletions(cmd *cobra.Command, toComplete string, ended bool, suffix string) []cobra.Completion {
	dir := runrecord.DefaultDir
	if f := cmd.Flags().Lookup("record-dir"); f != nil {
		dir = f.Value.String()
	}
	namespace := ""
	if f := cmd.Flags().Lookup("namespace"); f != nil {
		namespace = f.Value.String()
	}
	type vm struct{ namespace, name, state string }
	var vms []vm
	add := func(ns, name, state string) {
		if (namespace == "" || ns == namespace) && !slices.ContainsFunc(vms, func(v vm) bool { return v.namespace == ns && v.name == name }) {
			vms = append(vms, vm{ns, name, state})
		}
	}
	// Unreadable records (not root, say) offer nothing: completion has
	// nowhere to say why.
	entries, _ := runrecord.List(dir)
	for _, e := range entries {
		switch {
		case !e.Stale:
			add(e.Namespace, e.Name, "running")
		case ended:
			add(e.Namespace, e.Name, "stale")
		}
	}
	bgs, _ := runrecord.ListBackground(dir)
	for _, b := range bgs {
		switch {
		case b.Running:
			add(b.Namespace, b.Name, "starting")
		case ended:
			add(b.Namespace, b.Name, "ended")
		}
	}
	var out []cobra.Completion
	for _, v := range vms {
		word := v.namespace + "/" + v.name
		if !strings.Contains(toComplete, "/") && !slices.ContainsFunc(vms, func(o vm) bool { return o.name == v.name && o.namespace != v.namespace }) {
			word = v.name
		}
		if strings.HasPrefix(word, toComplete) {
			out = append(out, cobra.CompletionWithDesc(word+suffix, v.namespace+"/"+v.name+", "+v.state))
		}
	}
	return out
}
