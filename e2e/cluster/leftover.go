package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
)

const (
	stateFile     = "cluster.json"
	kubeletMarker = ".virtlauncher-e2e"
	ipForwardPath = "/proc/sys/net/ipv4/ip_forward"
)

// cgroupRoot is where the machine's cgroup hierarchies are mounted
// (v1 controllers, or the v2 unified one).
const cgroupRoot = "/sys/fs/cgroup"

// setupNetwork makes node 1's pod bridge and turns on forwarding (pod
// traffic to Services, and between the nodes' bridges, crosses the host),
// remembering the old value for Down.
func (c *Cluster) setupNetwork() error {
	if err := c.nodes[0].setupNetwork(); err != nil {
		return err
	}
	old, err := os.ReadFile(ipForwardPath)
	if err != nil {
		return err
	}
	c.st.IPForward = strings.TrimSpace(string(old))
	if err := c.recordState(); err != nil {
		return err
	}
	if err := os.WriteFile(ipForwardPath, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("enable IPv4 forwarding: %w", err)
	}
	return nil
}

// cleanLeftovers removes what a cluster run made: Down calls it after
// stopping the daemons, Up before starting when a killed run left its
// state behind. Without a state file there is nothing of ours to clean.
func cleanLeftovers(ctx context.Context, cfg Config, logf func(string, ...any)) error {
	data, err := os.ReadFile(filepath.Join(StateDir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(StateDir); err == nil {
			return fmt.Errorf("%s exists without %s: not made by this suite, or damaged; look at it and remove it by hand", StateDir, stateFile)
		}
		return nil
	}
	if err != nil {
		return err
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(StateDir, stateFile), err)
	}
	if st.Owner != os.Getpid() {
		if alive(st.Owner) && exeOf(st.Owner) == exeOf(os.Getpid()) {
			return fmt.Errorf("a cluster run (pid %d, started %s) is still going: wait for it or stop it", st.Owner, st.Started.Format(time.RFC3339))
		}
		if logf != nil {
			logf("cleaning up the cluster a killed run left (pid %d, started %s)", st.Owner, st.Started.Format(time.RFC3339))
		}
	}
	var errs []error
	errs = append(errs, killOurs(cfg.Bin, st.Pids))
	// Nothing to unmount: the cluster mounts only in its own mount
	// namespace (startInit), which is gone with its processes.
	errs = append(errs, removeCgroups("kubepods"), removeCgroups(node2Cgroup))
	for _, name := range []string{Bridge, node2Bridge} {
		if l, err := netlink.LinkByName(name); err == nil {
			if err := netlink.LinkDel(l); err != nil {
				errs = append(errs, fmt.Errorf("delete link %s: %w", name, err))
			}
		}
	}
	errs = append(errs, removeTables(ctx, cfg.Bin, st.TablesBefore))
	if st.IPForward != "" {
		if err := os.WriteFile(ipForwardPath, []byte(st.IPForward+"\n"), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore ip_forward: %w", err))
		}
	}
	for _, d := range st.CreatedDirs {
		if d == KubeletDir {
			if _, err := os.Stat(filepath.Join(KubeletDir, kubeletMarker)); err != nil {
				errs = append(errs, fmt.Errorf("%s lost its marker %s: left in place", KubeletDir, kubeletMarker))
				continue
			}
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clean up the cluster (state kept in %s for the next run): %w", StateDir, err)
	}
	for _, d := range []string{RunDir, StateDir} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	return nil
}

// killOurs kills, until none is left: the daemons we recorded, every
// process running one of our binaries (containerd's shims outlive
// containerd), and every process in a kubepods cgroup (the pods).
func killOurs(bin string, pids []int) error {
	for round := 0; round < 50; round++ {
		victims := map[int]bool{}
		for _, p := range pids {
			if alive(p) && strings.HasPrefix(exeOf(p), bin+"/") {
				victims[p] = true
			}
		}
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return err
		}
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			if strings.HasPrefix(exeOf(pid), bin+"/") || inKubepods(pid) {
				victims[pid] = true
			}
		}
		if len(victims) == 0 {
			return nil
		}
		for p := range victims {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("processes of the cluster survive SIGKILL")
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

func exeOf(pid int) string {
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return exe
}

func inKubepods(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (strings.HasPrefix(parts[2], "/kubepods") || strings.HasPrefix(parts[2], "/"+node2Cgroup+"/")) {
			return true
		}
	}
	return false
}

// removeCgroups removes the cgroup NAME (kubelet's kubepods) and all below
// it, in every hierarchy, deepest first. Its processes are gone by now.
func removeCgroups(name string) error {
	hier, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return err
	}
	roots := []string{filepath.Join(cgroupRoot, name)}
	for _, h := range hier {
		roots = append(roots, filepath.Join(cgroupRoot, h.Name(), name))
	}
	var errs []error
	for _, root := range roots {
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var rmErr error
			for try := 0; try < 20; try++ {
				if rmErr = syscall.Rmdir(d); rmErr == nil || errors.Is(rmErr, syscall.ENOENT) {
					rmErr = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if rmErr != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, rmErr))
			}
		}
	}
	return errors.Join(errs...)
}

// nftTables lists the machine's nftables tables as "FAMILY NAME".
func nftTables(ctx context.Context, bin string) ([]string, error) {
	out, err := Run(ctx, 10*time.Second, cleanEnv(bin), "", "/usr/sbin/nft", "list", "tables")
	if err != nil {
		return nil, err
	}
	var tables []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "table" {
			tables = append(tables, f[1]+" "+f[2])
		}
	}
	return tables, nil
}

// removeTables undoes the cluster's packet filtering: kube-proxy's
// table, and the iptables chains kubelet makes (through iptables-nft) for
// other components' sake. A filter, nat or mangle table that was not there
// before Up and holds only kubelet's chains is deleted whole; from any
// other, only kubelet's chains and jumps are removed: someone else may
// have made the table while we ran.
func removeTables(ctx context.Context, bin string, before []string) error {
	now, err := nftTables(ctx, bin)
	if err != nil {
		return err
	}
	had := map[string]bool{}
	for _, t := range before {
		had[t] = true
	}
	var errs []error
	for _, t := range now {
		family, name, _ := strings.Cut(t, " ")
		if family != "ip" && family != "ip6" {
			continue
		}
		switch name {
		case "kube-proxy":
			if !had[t] {
				if _, err := Run(ctx, 10*time.Second, cleanEnv(bin), "", "/usr/sbin/nft", "delete", "table", family, name); err != nil {
					errs = append(errs, err)
				}
			}
			continue
		case "filter", "nat", "mangle":
		default:
			continue
		}
		if !had[t] {
			listing, err := Run(ctx, 10*time.Second, cleanEnv(bin), "", "/usr/sbin/nft", "list", "table", family, name)
			if err == nil && onlyKubeletChains(listing) {
				if _, err := Run(ctx, 10*time.Second, cleanEnv(bin), "", "/usr/sbin/nft", "delete", "table", family, name); err != nil {
					errs = append(errs, err)
				}
				continue
			}
		}
		ipt := "/usr/sbin/iptables"
		if family == "ip6" {
			ipt = "/usr/sbin/ip6tables"
		}
		var cmds [][]string
		if name == "filter" {
			cmds = append(cmds, []string{"-D", "INPUT", "-j", "KUBE-FIREWALL"}, []string{"-D", "OUTPUT", "-j", "KUBE-FIREWALL"},
				[]string{"-F", "KUBE-FIREWALL"}, []string{"-X", "KUBE-FIREWALL"})
		}
		if name == "mangle" {
			cmds = append(cmds, []string{"-X", "KUBE-IPTABLES-HINT"})
		}
		cmds = append(cmds, []string{"-X", "KUBE-KUBELET-CANARY"})
		for _, args := range cmds {
			// Best effort: a chain or rule that is not there is fine.
			_, _ = Run(ctx, 10*time.Second, cleanEnv(bin), "", ipt, append([]string{"-w", "5", "-t", name}, args...)...)
		}
	}
	return errors.Join(errs...)
}

// onlyKubeletChains says whether an `nft list table` listing has nothing
// but KUBE-* chains and, in base chains, jumps to them.
func onlyKubeletChains(listing string) bool {
	chain, base := "", false
	for _, line := range strings.Split(listing, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || strings.HasPrefix(f[0], "#") || f[0] == "table":
		case f[0] == "}":
			// The end of a chain: one of someone else's (not a base
			// chain, not KUBE-*) is not ours to delete.
			if chain != "" && !base && !strings.HasPrefix(chain, "KUBE-") {
				return false
			}
			chain = ""
		case f[0] == "chain" && len(f) >= 2:
			chain, base = f[1], false
		case f[0] == "type": // a base chain's hook line
			base = true
		case strings.HasPrefix(chain, "KUBE-"):
		default:
			// A rule in a base chain: only "[counter packets N bytes N] jump KUBE-...".
			if len(f) < 2 || f[len(f)-2] != "jump" || !strings.HasPrefix(f[len(f)-1], "KUBE-") {
				return false
			}
			for _, w := range f[:len(f)-2] {
				if w != "counter" && w != "packets" && w != "bytes" && strings.Trim(w, "0123456789") != "" {
					return false
				}
			}
		}
	}
	return true
}

const capSysResource = 24

// hasCapability says whether this process has capability bit n in its
// effective set (/proc/self/status CapEff).
func hasCapability(n uint) bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			bits, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && bits&(1<<n) != 0
		}
	}
	return false
}

// makeShared creates dir (it must not exist) and makes it, in the
// cluster's mount namespace, a shared bind mount of itself, so that mounts
// made below it propagate both ways between pods and kubelet.
func (c *Cluster) makeShared(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := c.inNamespace(ctx, c.nodes[0].initPid, "/usr/bin/mount", "--bind", dir, dir); err != nil {
		return fmt.Errorf("bind mount %s: %w", dir, err)
	}
	if err := c.inNamespace(ctx, c.nodes[0].initPid, "/usr/bin/mount", "--make-shared", dir); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", dir, err)
	}
	return nil
}
