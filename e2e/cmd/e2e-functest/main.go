// Command e2e-functest runs KubeVirt's own functional test suite
// (kubevirt.io/kubevirt/tests at the control plane's version, built by
// `make e2e-functest-build`) against the e2e cluster, first with our
// launcher image and then with KubeVirt's own (the control), and
// compares the two JUnit reports (e2e/README.md, "KubeVirt's functional
// suite"):
//
//	e2e-functest run [-selection NAME] [-label F] [-focus RE] [-shard I/N] [-launchers ours,kubevirt]
//	e2e-functest compare -control kubevirt.junit.xml -ours ours.junit.xml
//	e2e-functest list [-selection NAME] [-v]
//
// run brings the cluster up (e2e/suite), pushes the stand-in guest images
// the suite's VMIs name (and its vm-killer and example hook sidecar),
// sets the selection's feature gates, runs the suite once per launcher
// image, takes the cluster down, and then
// compares. It exits non-zero when a spec passed on the control and not
// on ours and the deviation list does not say why. list prints how many
// specs a selection selects (every selection when none is named), and
// with -v their texts, from a dry run of the suite's binary: no cluster.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/virtlauncher/virtlauncher/e2e/functest"
	"github.com/virtlauncher/virtlauncher/internal/repo"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "run" && os.Args[1] != "compare" && os.Args[1] != "list") {
		fmt.Fprintln(os.Stderr, "usage: e2e-functest run|compare|list [flags]")
		os.Exit(2)
	}
	root, err := repo.Root()
	if err != nil {
		log.Fatal(err)
	}
	logf := log.New(os.Stderr, "e2e-functest: ", log.Ltime).Printf
	if os.Args[1] == "compare" {
		os.Exit(compareCmd(root, os.Args[2:]))
	}
	if os.Args[1] == "list" {
		os.Exit(listCmd(root, os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := runCmd(ctx, root, os.Args[2:], logf)
	if err != nil {
		logf("%v", err)
	}
	os.Exit(code)
}

func compareCmd(root string, args []string) int {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	control := fs.String("control", "", "JUnit report of the run on KubeVirt's launcher")
	ours := fs.String("ours", "", "JUnit report of the run on our launcher")
	devs := fs.String("deviations", filepath.Join(root, "e2e", "functest", "deviations.json"), "the deviation list")
	fs.Parse(args)
	if *control == "" || *ours == "" {
		fmt.Fprintln(os.Stderr, "compare: -control and -ours are both needed")
		return 2
	}
	c, err := compare(*control, *ours, *devs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	c.Write(os.Stdout)
	if !c.OK() {
		return 1
	}
	return 0
}

func compare(control, ours, devs string) (functest.Comparison, error) {
	cr, err := functest.ReadJUnit(control)
	if err != nil {
		return functest.Comparison{}, err
	}
	or, err := functest.ReadJUnit(ours)
	if err != nil {
		return functest.Comparison{}, err
	}
	ds, err := functest.ReadDeviations(devs)
	if err != nil {
		return functest.Comparison{}, err
	}
	return functest.Compare(cr, or, ds), nil
}

func listCmd(root string, args []string) int {
	fs := flag.NewFlagSet("list", flag.ExitOnError)
	suiteBin := fs.String("suite", filepath.Join(root, "bin", "e2e", "functest.test"), "the suite's test binary (make e2e-functest-build)")
	selections := fs.String("selections", filepath.Join(root, "e2e", "functest", "selections.json"), "the allow-list of selections")
	selection := fs.String("selection", "", "the selection to list (all when empty)")
	verbose := fs.Bool("v", false, "print each selected spec's text")
	fs.Parse(args)
	sels, err := functest.ReadSelections(*selections)
	if err != nil {
		fmt.Fprintln(os.Stderr, "list:", err)
		return 1
	}
	names := make([]string, 0, len(sels))
	for n := range sels {
		if *selection == "" || n == *selection {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		fmt.Fprintf(os.Stderr, "list: -selection %q: not in %s\n", *selection, *selections)
		return 2
	}
	sort.Strings(names)
	dir, err := os.MkdirTemp("", "e2e-functest-list-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "list:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	for _, n := range names {
		texts, err := functest.DryRun(context.Background(), *suiteBin, dir, sels[n])
		if err != nil {
			fmt.Fprintf(os.Stderr, "list: %s: %v\n", n, err)
			return 1
		}
		fmt.Printf("%s\t%d specs\t%d left out by name\n", n, len(texts), len(sels[n].Skip))
		if *verbose {
			for _, t := range texts {
				fmt.Printf("\t%s\n", t)
			}
		}
	}
	return 0
}

// options are run's flags.
type options struct {
	suiteBin, selections, selection, label, focus, shard, launchers, out, deviations string
	timeout                                                                          time.Duration
	seed                                                                             int64
}

func runCmd(ctx context.Context, root string, args []string, logf func(string, ...any)) (int, error) {
	var o options
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	fs.StringVar(&o.suiteBin, "suite", filepath.Join(root, "bin", "e2e", "functest.test"), "the suite's test binary (make e2e-functest-build)")
	fs.StringVar(&o.selections, "selections", filepath.Join(root, "e2e", "functest", "selections.json"), "the allow-list of selections")
	fs.StringVar(&o.selection, "selection", "conformance-nologin", "the selection to run, by its name in -selections")
	fs.StringVar(&o.label, "label", "", "a ginkgo label filter in place of the selection's (an ad hoc run)")
	fs.StringVar(&o.focus, "focus", "", "a ginkgo focus in place of the selection's (an ad hoc run)")
	fs.StringVar(&o.shard, "shard", "", "I/N: run only the I-th of N shares of the selected specs (1-based)")
	fs.StringVar(&o.launchers, "launchers", "ours,kubevirt", "the launcher images to run the suite on, in order: ours, kubevirt")
	fs.StringVar(&o.out, "out", filepath.Join(root, "bin", "e2e", "functest-results"), "where the reports and logs go")
	fs.StringVar(&o.deviations, "deviations", filepath.Join(root, "e2e", "functest", "deviations.json"), "the deviation list")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Minute, "the deadline of one run of the suite")
	fs.Int64Var(&o.seed, "seed", time.Now().Unix()%100000, "ginkgo's random seed, the same for every launcher's run: both run the specs in one order")
	fs.Parse(args)
	r, err := newRunner(root, o, logf)
	if err != nil {
		return 2, err
	}
	return r.run(ctx)
}

// launcherNames checks -launchers.
func launcherNames(s string) ([]string, error) {
	var out []string
	for _, l := range strings.Split(s, ",") {
		switch l {
		case "ours", "kubevirt":
			out = append(out, l)
		default:
			return nil, fmt.Errorf("-launchers: %q is neither ours nor kubevirt", l)
		}
	}
	return out, nil
}
