// Command hooksidecar is a small KubeVirt hook sidecar for the tests: it
// speaks the hook protocol (api/hooks) on <dir>/<name>.sock as KubeVirt's
// example sidecars do, and
//   - OnDefineDomain: sets the SMBIOS base board manufacturer to the VMI's
//     annotation smbios.vm.kubevirt.io/baseBoardManufacturer, as KubeVirt's
//     smbios example sidecar does (no annotation: the XML is returned as
//     it came);
//   - OnDefineDomain (with --plugin NAME): plays a network binding
//     plugin's sidecar, as KubeVirt's slirp plugin does: every interface
//     of the VMI bound to plugin NAME becomes a user-mode (QEMU's own
//     network) interface of the domain, with the spec's MAC and model and
//     KubeVirt's alias;
//   - PreCloudInitIso (with --user-data-append): appends a line to the
//     user data;
//   - Shutdown (v1alpha3): exits.
//
// --fail <hook point> makes that callback answer an error. Each call is
// logged on stderr as "hooksidecar: <callback> <version>".
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	hooksinfo "github.com/virtlauncher/virtlauncher/api/hooks/info"
	hooksv1alpha1 "github.com/virtlauncher/virtlauncher/api/hooks/v1alpha1"
	hooksv1alpha2 "github.com/virtlauncher/virtlauncher/api/hooks/v1alpha2"
	hooksv1alpha3 "github.com/virtlauncher/virtlauncher/api/hooks/v1alpha3"
)

// AnnotationBaseBoardManufacturer is read from the VMI (KubeVirt's smbios
// example sidecar's annotation).
const AnnotationBaseBoardManufacturer = "smbios.vm.kubevirt.io/baseBoardManufacturer"

type sidecar struct {
	name, appendLine, fail, plugin string
	versions                       []string
	done                           chan struct{}
	once                           sync.Once
}

func main() {
	s := &sidecar{done: make(chan struct{})}
	dir := flag.String("dir", "/var/run/kubevirt-hooks", "directory to create the socket in")
	versions := flag.String("version", "v1alpha3", "comma-separated Callbacks versions to offer")
	flag.StringVar(&s.name, "name", "vl-hook", "sidecar name (Info) and socket name (<name>.sock)")
	flag.StringVar(&s.appendLine, "user-data-append", "", "subscribe to PreCloudInitIso and append this line to the user data")
	flag.StringVar(&s.plugin, "plugin", "", "play the sidecar of this network binding plugin: add its interfaces to the domain")
	flag.StringVar(&s.fail, "fail", "", "answer an error from this hook point (OnDefineDomain, PreCloudInitIso, Shutdown)")
	flag.Parse()
	s.versions = strings.Split(*versions, ",")
	if err := s.run(filepath.Join(*dir, s.name+".sock")); err != nil {
		fmt.Fprintln(os.Stderr, "hooksidecar:", err)
		os.Exit(1)
	}
}

func (s *sidecar) run(sock string) error {
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	defer os.Remove(sock)
	srv := grpc.NewServer()
	hooksinfo.RegisterInfoServer(srv, infoServer{s: s})
	hooksv1alpha1.RegisterCallbacksServer(srv, v1alpha1Server{s: s})
	hooksv1alpha2.RegisterCallbacksServer(srv, v1alpha2Server{s: s})
	hooksv1alpha3.RegisterCallbacksServer(srv, v1alpha3Server{s: s})
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	fmt.Fprintf(os.Stderr, "hooksidecar: serving on %s\n", sock)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-errc:
		return err
	case <-sigs:
	case <-s.done:
	}
	srv.GracefulStop()
	return nil
}

func (s *sidecar) logCall(callback, version string) error {
	fmt.Fprintf(os.Stderr, "hooksidecar: %s %s\n", callback, version)
	if s.fail == callback {
		return fmt.Errorf("hooksidecar %s: %s failing as asked (--fail)", s.name, callback)
	}
	return nil
}

type infoServer struct {
	hooksinfo.UnimplementedInfoServer
	s *sidecar
}

func (i infoServer) Info(context.Context, *hooksinfo.InfoParams) (*hooksinfo.InfoResult, error) {
	fmt.Fprintln(os.Stderr, "hooksidecar: Info")
	pts := []*hooksinfo.HookPoint{{Name: "OnDefineDomain"}}
	if i.s.appendLine != "" {
		pts = append(pts, &hooksinfo.HookPoint{Name: "PreCloudInitIso"})
	}
	if slices.Contains(i.s.versions, "v1alpha3") {
		pts = append(pts, &hooksinfo.HookPoint{Name: "Shutdown"})
	}
	return &hooksinfo.InfoResult{Name: i.s.name, Versions: i.s.versions, HookPoints: pts}, nil
}

// onDefineDomain sets the base board manufacturer from the annotation.
func (s *sidecar) onDefineDomain(version string, domainXML, vmiJSON []byte) ([]byte, error) {
	if err := s.logCall("OnDefineDomain", version); err != nil {
		return nil, err
	}
	var vmi v1.VirtualMachineInstance
	if err := json.Unmarshal(vmiJSON, &vmi); err != nil {
		return nil, fmt.Errorf("VMI: %w", err)
	}
	maker, ok := vmi.Annotations[AnnotationBaseBoardManufacturer]
	if !ok && s.plugin == "" {
		return domainXML, nil
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(string(domainXML)); err != nil {
		return nil, fmt.Errorf("domain XML: %w", err)
	}
	if s.plugin != "" {
		if err := s.addPluginInterfaces(&vmi, &dom); err != nil {
			return nil, err
		}
	}
	if !ok {
		out, err := dom.Marshal()
		return []byte(out), err
	}
	if dom.OS == nil {
		dom.OS = &libvirtxml.DomainOS{}
	}
	dom.OS.SMBios = &libvirtxml.DomainSMBios{Mode: "sysinfo"}
	if len(dom.SysInfo) == 0 {
		dom.SysInfo = []libvirtxml.DomainSysInfo{{}}
	}
	if dom.SysInfo[0].SMBIOS == nil {
		dom.SysInfo[0].SMBIOS = &libvirtxml.DomainSysInfoSMBIOS{}
	}
	dom.SysInfo[0].SMBIOS.BaseBoard = []libvirtxml.DomainSysInfoBaseBoard{{
		Entry: []libvirtxml.DomainSysInfoEntry{{Name: "manufacturer", Value: maker}},
	}}
	out, err := dom.Marshal()
	return []byte(out), err
}

// addPluginInterfaces adds a user-mode interface for each interface of
// the VMI bound to the plugin, unless the domain has it already (its
// alias ua-<name>).
func (s *sidecar) addPluginInterfaces(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	if dom.Devices == nil {
		dom.Devices = &libvirtxml.DomainDeviceList{}
	}
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.Binding == nil || iface.Binding.Name != s.plugin {
			continue
		}
		alias := "ua-" + iface.Name
		if slices.ContainsFunc(dom.Devices.Interfaces, func(d libvirtxml.DomainInterface) bool {
			return d.Alias != nil && d.Alias.Name == alias
		}) {
			return fmt.Errorf("interface %s: the launcher defined it already", iface.Name)
		}
		model := iface.Model
		if model == "" || model == v1.VirtIO {
			model = "virtio-non-transitional"
		}
		d := libvirtxml.DomainInterface{
			Source: &libvirtxml.DomainInterfaceSource{User: &libvirtxml.DomainInterfaceSourceUser{}},
			Model:  &libvirtxml.DomainInterfaceModel{Type: model},
			Alias:  &libvirtxml.DomainAlias{Name: alias},
		}
		if iface.MacAddress != "" {
			d.MAC = &libvirtxml.DomainInterfaceMAC{Address: iface.MacAddress}
		}
		dom.Devices.Interfaces = append(dom.Devices.Interfaces, d)
		fmt.Fprintf(os.Stderr, "hooksidecar: added interface %s of plugin %s\n", iface.Name, s.plugin)
	}
	return nil
}

// preCloudInitIso appends a line to the user data of KubeVirt's
// CloudInitData, keeping every other field as it came.
func (s *sidecar) preCloudInitIso(version string, data []byte) ([]byte, error) {
	if err := s.logCall("PreCloudInitIso", version); err != nil {
		return nil, err
	}
	var d map[string]any
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("cloudInitData: %w", err)
	}
	user, ok := d["UserData"].(string)
	if !ok {
		return nil, errors.New("cloudInitData: no UserData")
	}
	if user != "" && !strings.HasSuffix(user, "\n") {
		user += "\n"
	}
	d["UserData"] = user + s.appendLine + "\n"
	return json.Marshal(d)
}

type v1alpha1Server struct {
	hooksv1alpha1.UnimplementedCallbacksServer
	s *sidecar
}

func (v v1alpha1Server) OnDefineDomain(_ context.Context, p *hooksv1alpha1.OnDefineDomainParams) (*hooksv1alpha1.OnDefineDomainResult, error) {
	x, err := v.s.onDefineDomain("v1alpha1", p.GetDomainXML(), p.GetVmi())
	return &hooksv1alpha1.OnDefineDomainResult{DomainXML: x}, err
}

type v1alpha2Server struct {
	hooksv1alpha2.UnimplementedCallbacksServer
	s *sidecar
}

func (v v1alpha2Server) OnDefineDomain(_ context.Context, p *hooksv1alpha2.OnDefineDomainParams) (*hooksv1alpha2.OnDefineDomainResult, error) {
	x, err := v.s.onDefineDomain("v1alpha2", p.GetDomainXML(), p.GetVmi())
	return &hooksv1alpha2.OnDefineDomainResult{DomainXML: x}, err
}

func (v v1alpha2Server) PreCloudInitIso(_ context.Context, p *hooksv1alpha2.PreCloudInitIsoParams) (*hooksv1alpha2.PreCloudInitIsoResult, error) {
	d, err := v.s.preCloudInitIso("v1alpha2", p.GetCloudInitData())
	return &hooksv1alpha2.PreCloudInitIsoResult{CloudInitData: d}, err
}

type v1alpha3Server struct {
	hooksv1alpha3.UnimplementedCallbacksServer
	s *sidecar
}

func (v v1alpha3Server) OnDefineDomain(_ context.Context, p *hooksv1alpha3.OnDefineDomainParams) (*hooksv1alpha3.OnDefineDomainResult, error) {
	x, err := v.s.onDefineDomain("v1alpha3", p.GetDomainXML(), p.GetVmi())
	return &hooksv1alpha3.OnDefineDomainResult{DomainXML: x}, err
}

func (v v1alpha3Server) PreCloudInitIso(_ context.Context, p *hooksv1alpha3.PreCloudInitIsoParams) (*hooksv1alpha3.PreCloudInitIsoResult, error) {
	d, err := v.s.preCloudInitIso("v1alpha3", p.GetCloudInitData())
	return &hooksv1alpha3.PreCloudInitIsoResult{CloudInitData: d}, err
}

func (v v1alpha3Server) Shutdown(context.Context, *hooksv1alpha3.ShutdownParams) (*hooksv1alpha3.ShutdownResult, error) {
	if err := v.s.logCall("Shutdown", "v1alpha3"); err != nil {
		return nil, err
	}
	v.s.once.Do(func() { close(v.s.done) })
	return &hooksv1alpha3.ShutdownResult{}, nil
}
