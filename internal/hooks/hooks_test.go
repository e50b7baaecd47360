package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	hooksinfo "github.com/virtlauncher/virtlauncher/api/hooks/info"
	hooksv1alpha1 "github.com/virtlauncher/virtlauncher/api/hooks/v1alpha1"
	hooksv1alpha2 "github.com/virtlauncher/virtlauncher/api/hooks/v1alpha2"
	hooksv1alpha3 "github.com/virtlauncher/virtlauncher/api/hooks/v1alpha3"
	"github.com/virtlauncher/virtlauncher/internal/disks"
)

// sidecar is a real gRPC hook server on a unix socket, serving Info and
// every Callbacks version; what it answers is set per test.
type sidecar struct {
	name     string
	versions []string
	points   []*hooksinfo.HookPoint
	noInfo   bool // do not serve Info at all

	// onDefine returns the new XML; nil appends "<name>@<version>;".
	onDefine func(version string, xml, vmi []byte) ([]byte, error)
	// preCI answers PreCloudInitIso; nil echoes the data.
	preCI    func(version string, data, legacy, vmi []byte) (outData, outLegacy []byte, err error)
	shutdown func() error

	mu    sync.Mutex
	calls []string // "<method> <version>"
	srv   *grpc.Server
}

func (s *sidecar) record(c string) {
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

func (s *sidecar) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (s *sidecar) define(version string, xml, vmi []byte) ([]byte, error) {
	s.record("OnDefineDomain " + version)
	if s.onDefine != nil {
		return s.onDefine(version, xml, vmi)
	}
	return append(slices.Clone(xml), []byte(s.name+"@"+version+";")...), nil
}

func (s *sidecar) cloudInit(version string, data, legacy, vmi []byte) ([]byte, []byte, error) {
	s.record("PreCloudInitIso " + version)
	if s.preCI != nil {
		return s.preCI(version, data, legacy, vmi)
	}
	return data, nil, nil
}

type infoSrv struct {
	hooksinfo.UnimplementedInfoServer
	s *sidecar
}

func (i infoSrv) Info(context.Context, *hooksinfo.InfoParams) (*hooksinfo.InfoResult, error) {
	i.s.record("Info")
	return &hooksinfo.InfoResult{Name: i.s.name, Versions: i.s.versions, HookPoints: i.s.points}, nil
}

type v1Srv struct {
	hooksv1alpha1.UnimplementedCallbacksServer
	s *sidecar
}

func (v v1Srv) OnDefineDomain(_ context.Context, p *hooksv1alpha1.OnDefineDomainParams) (*hooksv1alpha1.OnDefineDomainResult, error) {
	x, err := v.s.define(V1alpha1, p.DomainXML, p.Vmi)
	return &hooksv1alpha1.OnDefineDomainResult{DomainXML: x}, err
}

type v2Srv struct {
	hooksv1alpha2.UnimplementedCallbacksServer
	s *sidecar
}

func (v v2Srv) OnDefineDomain(_ context.Context, p *hooksv1alpha2.OnDefineDomainParams) (*hooksv1alpha2.OnDefineDomainResult, error) {
	x, err := v.s.define(V1alpha2, p.DomainXML, p.Vmi)
	return &hooksv1alpha2.OnDefineDomainResult{DomainXML: x}, err
}

func (v v2Srv) PreCloudInitIso(_ context.Context, p *hooksv1alpha2.PreCloudInitIsoParams) (*hooksv1alpha2.PreCloudInitIsoResult, error) {
	d, l, err := v.s.cloudInit(V1alpha2, p.CloudInitData, p.CloudInitNoCloudSource, p.Vmi)
	return &hooksv1alpha2.PreCloudInitIsoResult{CloudInitData: d, CloudInitNoCloudSource: l}, err
}

type v3Srv struct {
	hooksv1alpha3.UnimplementedCallbacksServer
	s *sidecar
}

func (v v3Srv) OnDefineDomain(_ context.Context, p *hooksv1alpha3.OnDefineDomainParams) (*hooksv1alpha3.OnDefineDomainResult, error) {
	x, err := v.s.define(V1alpha3, p.DomainXML, p.Vmi)
	return &hooksv1alpha3.OnDefineDomainResult{DomainXML: x}, err
}

func (v v3Srv) PreCloudInitIso(_ context.Context, p *hooksv1alpha3.PreCloudInitIsoParams) (*hooksv1alpha3.PreCloudInitIsoResult, error) {
	d, l, err := v.s.cloudInit(V1alpha3, p.CloudInitData, p.CloudInitNoCloudSource, p.Vmi)
	return &hooksv1alpha3.PreCloudInitIsoResult{CloudInitData: d, CloudInitNoCloudSource: l}, err
}

func (v v3Srv) Shutdown(context.Context, *hooksv1alpha3.ShutdownParams) (*hooksv1alpha3.ShutdownResult, error) {
	v.s.record("Shutdown " + V1alpha3)
	if v.s.shutdown != nil {
		return &hooksv1alpha3.ShutdownResult{}, v.s.shutdown()
	}
	return &hooksv1alpha3.ShutdownResult{}, nil
}

// serve starts s on <dir>/<sub>/<sock>; stopped at cleanup.
func (s *sidecar) serve(t *testing.T, dir, sub, sock string) {
	t.Helper()
	if err := s.start(dir, sub, sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.srv.Stop)
}

// serveLater starts s after delay from another goroutine; the test's
// cleanup stops it and reports a failure to start.
func (s *sidecar) serveLater(t *testing.T, delay time.Duration, before func(), dir, sub, sock string) {
	errc := make(chan error, 1)
	go func() {
		time.Sleep(delay)
		if before != nil {
			before()
		}
		errc <- s.start(dir, sub, sock)
	}()
	t.Cleanup(func() {
		if err := <-errc; err != nil {
			t.Errorf("late sidecar %s: %v", s.name, err)
			return
		}
		s.srv.Stop()
	})
}

func (s *sidecar) start(dir, sub, sock string) error {
	d := filepath.Join(dir, sub)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	lis, err := net.Listen("unix", filepath.Join(d, sock))
	if err != nil {
		return err
	}
	s.srv = grpc.NewServer()
	if !s.noInfo {
		hooksinfo.RegisterInfoServer(s.srv, infoSrv{s: s})
	}
	hooksv1alpha1.RegisterCallbacksServer(s.srv, v1Srv{s: s})
	hooksv1alpha2.RegisterCallbacksServer(s.srv, v2Srv{s: s})
	hooksv1alpha3.RegisterCallbacksServer(s.srv, v3Srv{s: s})
	go s.srv.Serve(lis)
	return nil
}

func points(names ...string) []*hooksinfo.HookPoint {
	var out []*hooksinfo.HookPoint
	for _, n := range names {
		out = append(out, &hooksinfo.HookPoint{Name: n})
	}
	return out
}

func all() []string { return []string{V1alpha1, V1alpha2, V1alpha3} }

func collect(t *testing.T, dir string, n uint, within time.Duration) (*Manager, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	m, err := Collect(ctx, dir, n, nil)
	if err == nil {
		t.Cleanup(func() { m.Close() })
	}
	return m, err
}

func mustCollect(t *testing.T, dir string, n uint) *Manager {
	t.Helper()
	m, err := collect(t, dir, n, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var testVMI = &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns",
	Annotations: map[string]string{"smbios.vm.kubevirt.io/baseBoardManufacturer": "Radical Edward"}}}

func TestCollectNoneLooksAtNothing(t *testing.T) {
	m := mustCollect(t, "/nonexistent/hooks", 0)
	if len(m.Sidecars()) != 0 {
		t.Fatalf("sidecars %v", m.Sidecars())
	}
	out, err := m.OnDefineDomain(context.Background(), "<domain/>", testVMI)
	if err != nil || out != "<domain/>" {
		t.Fatalf("OnDefineDomain without sidecars: %q %v", out, err)
	}
}

func TestCollectMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hooks")
	_, err := collect(t, dir, 1, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), dir) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("error %v, want one naming %s", err, dir)
	}
}

// The newest version both sides speak is chosen, and that version's
// service is the one called.
func TestVersionSelection(t *testing.T) {
	for _, c := range []struct {
		offer []string
		want  string
	}{
		{all(), V1alpha3},
		{[]string{V1alpha2, V1alpha1}, V1alpha2},
		{[]string{V1alpha1, "v1beta9"}, V1alpha1},
		{[]string{V1alpha1, V1alpha3}, V1alpha3},
	} {
		t.Run(strings.Join(c.offer, ","), func(t *testing.T) {
			dir := t.TempDir()
			s := &sidecar{name: "x", versions: c.offer, points: points(PointOnDefineDomain)}
			s.serve(t, dir, "hook-sidecar-0", "x.sock")
			m := mustCollect(t, dir, 1)
			if got := m.Sidecars()[0].Version; got != c.want {
				t.Fatalf("version %s, want %s", got, c.want)
			}
			out, err := m.OnDefineDomain(context.Background(), "<d/>", testVMI)
			if err != nil {
				t.Fatal(err)
			}
			if out != "<d/>x@"+c.want+";" || !slices.Equal(s.Calls(), []string{"Info", "OnDefineDomain " + c.want}) {
				t.Fatalf("out %q calls %v", out, s.Calls())
			}
		})
	}
}

func TestUnsupportedVersionIsFatal(t *testing.T) {
	dir := t.TempDir()
	(&sidecar{name: "future", versions: []string{"v2"}}).serve(t, dir, "hook-sidecar-0", "f.sock")
	_, err := collect(t, dir, 1, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), `"future"`) || !strings.Contains(err.Error(), "f.sock") || !strings.Contains(err.Error(), `["v2"]`) {
		t.Fatalf("error %v", err)
	}
}

func TestInfoErrorIsFatal(t *testing.T) {
	dir := t.TempDir()
	(&sidecar{name: "mute", noInfo: true}).serve(t, dir, "hook-sidecar-0", "m.sock")
	t0 := time.Now()
	_, err := collect(t, dir, 1, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "m.sock: Info:") || !strings.Contains(err.Error(), "Unimplemented") {
		t.Fatalf("error %v", err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("took %v: an Info failure must not wait for the deadline", d)
	}
}

// Sidecars run in discovery order; priorities do not reorder them
// (KubeVirt v1.9), and a sidecar found in a later look comes after.
func TestOrderIsDiscoveryOrder(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, prio int32) *sidecar {
		return &sidecar{name: name, versions: all(), points: []*hooksinfo.HookPoint{{Name: PointOnDefineDomain, Priority: prio}}}
	}
	mk("b", 1).serve(t, dir, "hook-sidecar-1", "b.sock")
	mk("a", 0).serve(t, dir, "hook-sidecar-0", "a.sock")
	mk("c", 100).serve(t, dir, "hook-sidecar-2", "c.sock")
	late := mk("late", 50)
	// A socket file with nobody listening: found but not answering, until
	// the late sidecar takes its place.
	sub := filepath.Join(dir, "hook-sidecar-00")
	os.MkdirAll(sub, 0o755)
	stale, err := net.Listen("unix", filepath.Join(sub, "late.sock"))
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	late.serveLater(t, 700*time.Millisecond, func() { os.Remove(filepath.Join(sub, "late.sock")) }, dir, "hook-sidecar-00", "late.sock")
	m := mustCollect(t, dir, 4)
	out, err := m.OnDefineDomain(context.Background(), "", testVMI)
	if err != nil {
		t.Fatal(err)
	}
	if want := "a@v1alpha3;b@v1alpha3;c@v1alpha3;late@v1alpha3;"; out != want {
		t.Fatalf("order %q, want %q", out, want)
	}
}

func TestCollectTimesOutNamingTheSockets(t *testing.T) {
	dir := t.TempDir()
	(&sidecar{name: "ok", versions: all()}).serve(t, dir, "hook-sidecar-0", "ok.sock")
	sub := filepath.Join(dir, "hook-sidecar-1")
	os.MkdirAll(sub, 0o755)
	stale, err := net.Listen("unix", filepath.Join(sub, "gone.sock"))
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	t0 := time.Now()
	_, err = collect(t, dir, 3, 1500*time.Millisecond)
	d := time.Since(t0)
	if err == nil {
		t.Fatal("Collect succeeded with 1 of 3 sidecars")
	}
	for _, w := range []string{"1 of 3", "deadline exceeded", "found: " + filepath.Join(dir, "hook-sidecar-0", "ok.sock"), "not answering: " + filepath.Join(sub, "gone.sock")} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if d > 5*time.Second {
		t.Errorf("Collect took %v past a 1.5 s deadline", d)
	}
}

// Symbolic links (to a directory or to a socket) and plain files are not
// sidecars.
func TestLinksAndFilesIgnored(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	(&sidecar{name: "outside", versions: all()}).serve(t, elsewhere, "d", "o.sock")
	os.Symlink(filepath.Join(elsewhere, "d"), filepath.Join(dir, "hook-sidecar-0"))
	os.MkdirAll(filepath.Join(dir, "hook-sidecar-1"), 0o755)
	os.Symlink(filepath.Join(elsewhere, "d", "o.sock"), filepath.Join(dir, "hook-sidecar-1", "link.sock"))
	os.WriteFile(filepath.Join(dir, "hook-sidecar-1", "file.sock"), nil, 0o644)
	(&sidecar{name: "real", versions: all()}).serve(t, dir, "hook-sidecar-2", "r.sock")
	m := mustCollect(t, dir, 1)
	_, err := collect(t, dir, 2, 1*time.Second)
	if len(m.Sidecars()) != 1 || m.Sidecars()[0].Name != "real" || err == nil {
		t.Fatalf("sidecars %v, second collect error %v", m.Sidecars(), err)
	}
}

// Collect waits for a sidecar that comes up late.
func TestCollectWaitsForLateSidecar(t *testing.T) {
	dir := t.TempDir()
	s := &sidecar{name: "slow", versions: all()}
	s.serveLater(t, 800*time.Millisecond, nil, dir, "hook-sidecar-0", "s.sock")
	m := mustCollect(t, dir, 1)
	if len(m.Sidecars()) != 1 {
		t.Fatalf("sidecars %v", m.Sidecars())
	}
}

func TestOnDefineDomainPassesVMIAndStopsOnError(t *testing.T) {
	dir := t.TempDir()
	var gotVMI v1.VirtualMachineInstance
	first := &sidecar{name: "first", versions: all(), points: points(PointOnDefineDomain), onDefine: func(_ string, xml, vmi []byte) ([]byte, error) {
		if err := json.Unmarshal(vmi, &gotVMI); err != nil {
			return nil, err
		}
		return []byte("<changed/>"), nil
	}}
	bad := &sidecar{name: "bad", versions: all(), points: points(PointOnDefineDomain), onDefine: func(string, []byte, []byte) ([]byte, error) {
		return nil, errors.New("no thanks")
	}}
	after := &sidecar{name: "after", versions: all(), points: points(PointOnDefineDomain)}
	first.serve(t, dir, "hook-sidecar-0", "a.sock")
	bad.serve(t, dir, "hook-sidecar-1", "b.sock")
	after.serve(t, dir, "hook-sidecar-2", "c.sock")
	m := mustCollect(t, dir, 3)
	_, err := m.OnDefineDomain(context.Background(), "<domain/>", testVMI)
	if err == nil || !strings.Contains(err.Error(), `hook sidecar "bad"`) || !strings.Contains(err.Error(), "no thanks") || !strings.Contains(err.Error(), "b.sock") {
		t.Fatalf("error %v", err)
	}
	if gotVMI.Annotations["smbios.vm.kubevirt.io/baseBoardManufacturer"] != "Radical Edward" || gotVMI.Name != "vm" {
		t.Errorf("sidecar got VMI %+v", gotVMI.ObjectMeta)
	}
	if len(after.Calls()) != 1 { // Info only
		t.Errorf("a sidecar after the failing one was called: %v", after.Calls())
	}
}

func TestOnDefineDomainEmptyAnswer(t *testing.T) {
	dir := t.TempDir()
	(&sidecar{name: "blank", versions: all(), points: points(PointOnDefineDomain), onDefine: func(string, []byte, []byte) ([]byte, error) {
		return nil, nil
	}}).serve(t, dir, "hook-sidecar-0", "a.sock")
	m := mustCollect(t, dir, 1)
	if _, err := m.OnDefineDomain(context.Background(), "<domain/>", testVMI); err == nil || !strings.Contains(err.Error(), "empty domain XML") {
		t.Fatalf("error %v", err)
	}
}

func ciData() *disks.CloudInitData {
	return &disks.CloudInitData{DataSource: disks.DataSourceNoCloud, UserData: "#!/bin/sh\n", NetworkData: "net",
		NoCloudMetaData: &disks.NoCloudMetadata{InstanceID: "id-1", LocalHostname: "vm"}, VolumeName: "ci"}
}

// Only the first v1alpha2+ subscriber is called (a v1alpha1 one before it
// is skipped); it gets KubeVirt's JSON keys in both forms.
func TestPreCloudInitIsoFirstOnly(t *testing.T) {
	dir := t.TempDir()
	old := &sidecar{name: "old", versions: []string{V1alpha1}, points: points(PointPreCloudInitIso)}
	var gotData map[string]any
	var gotLegacy map[string]any
	first := &sidecar{name: "first", versions: []string{V1alpha2}, points: points(PointPreCloudInitIso), preCI: func(_ string, data, legacy, _ []byte) ([]byte, []byte, error) {
		json.Unmarshal(data, &gotData)
		json.Unmarshal(legacy, &gotLegacy)
		var d disks.CloudInitData
		json.Unmarshal(data, &d)
		d.UserData += "echo first\n"
		out, err := json.Marshal(d)
		return out, nil, err
	}}
	second := &sidecar{name: "second", versions: all(), points: points(PointPreCloudInitIso)}
	old.serve(t, dir, "hook-sidecar-0", "o.sock")
	first.serve(t, dir, "hook-sidecar-1", "f.sock")
	second.serve(t, dir, "hook-sidecar-2", "s.sock")
	m := mustCollect(t, dir, 3)
	out, err := m.PreCloudInitIso(context.Background(), testVMI, ciData())
	if err != nil {
		t.Fatal(err)
	}
	if out.UserData != "#!/bin/sh\necho first\n" || out.NoCloudMetaData == nil || out.NoCloudMetaData.InstanceID != "id-1" {
		t.Errorf("result %+v", out)
	}
	if len(old.Calls()) != 1 || len(second.Calls()) != 1 || !slices.Equal(first.Calls(), []string{"Info", "PreCloudInitIso v1alpha2"}) {
		t.Errorf("calls: old %v first %v second %v", old.Calls(), first.Calls(), second.Calls())
	}
	md, _ := gotData["NoCloudMetaData"].(map[string]any)
	if gotData["DataSource"] != "noCloud" || gotData["UserData"] != "#!/bin/sh\n" || gotData["VolumeName"] != "ci" || md["instance-id"] != "id-1" {
		t.Errorf("cloudInitData sent %v", gotData)
	}
	if _, ok := gotData["DevicesData"]; !ok {
		t.Errorf("cloudInitData lacks DevicesData (KubeVirt sends null): %v", gotData)
	}
	if gotLegacy["userData"] != "#!/bin/sh\n" || gotLegacy["networkData"] != "net" {
		t.Errorf("cloudInitNoCloudSource sent %v", gotLegacy)
	}
}

func TestPreCloudInitIsoAnswers(t *testing.T) {
	for _, c := range []struct {
		name         string
		data, legacy string
		wantUser     string
		wantMeta     bool
		wantErr      string
	}{
		{"older form", "", `{"userData":"legacy"}`, "legacy", false, ""},
		{"incomplete data falls back", `{"DataSource":"noCloud","UserData":"x"}`, `{"userData":"legacy"}`, "legacy", false, ""},
		{"complete data", `{"DataSource":"noCloud","UserData":"new","NoCloudMetaData":{"instance-id":"z"}}`, "", "new", true, ""},
		{"nothing", "", "", "", false, "answered neither"},
		{"bad JSON", `{"UserData":`, "", "", false, "cloudInitData: unexpected end of JSON input"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			(&sidecar{name: "ci", versions: all(), points: points(PointPreCloudInitIso), preCI: func(string, []byte, []byte, []byte) ([]byte, []byte, error) {
				return []byte(c.data), []byte(c.legacy), nil
			}}).serve(t, dir, "hook-sidecar-0", "c.sock")
			m := mustCollect(t, dir, 1)
			out, err := m.PreCloudInitIso(context.Background(), testVMI, ciData())
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), `hook sidecar "ci"`) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out.UserData != c.wantUser || (out.NoCloudMetaData != nil) != c.wantMeta || out.DataSource != disks.DataSourceNoCloud {
				t.Errorf("result %+v", out)
			}
		})
	}
}

// Every v1alpha3 subscriber is told to shut down, even after one fails;
// a v1alpha2 subscriber is not called.
func TestShutdown(t *testing.T) {
	dir := t.TempDir()
	bad := &sidecar{name: "bad", versions: all(), points: points(PointShutdown), shutdown: func() error { return errors.New("busy") }}
	good := &sidecar{name: "good", versions: all(), points: points(PointShutdown, PointOnDefineDomain)}
	v2 := &sidecar{name: "v2", versions: []string{V1alpha2}, points: points(PointShutdown)}
	bad.serve(t, dir, "hook-sidecar-0", "b.sock")
	good.serve(t, dir, "hook-sidecar-1", "g.sock")
	v2.serve(t, dir, "hook-sidecar-2", "v.sock")
	m := mustCollect(t, dir, 3)
	err := m.Shutdown(context.Background())
	if err == nil || !strings.Contains(err.Error(), "busy") || !strings.Contains(err.Error(), `"bad"`) {
		t.Fatalf("error %v", err)
	}
	if !slices.Equal(good.Calls(), []string{"Info", "Shutdown v1alpha3"}) || len(v2.Calls()) != 1 {
		t.Errorf("calls: good %v v2 %v", good.Calls(), v2.Calls())
	}
}

// A callback that never answers is cut off by its deadline (here the
// caller's, shorter than CallTimeout).
func TestCallDeadline(t *testing.T) {
	dir := t.TempDir()
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	(&sidecar{name: "stuck", versions: all(), points: points(PointOnDefineDomain), onDefine: func(string, []byte, []byte) ([]byte, error) {
		<-block
		return nil, nil
	}}).serve(t, dir, "hook-sidecar-0", "s.sock")
	m := mustCollect(t, dir, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := m.OnDefineDomain(ctx, "<d/>", testVMI)
	if err == nil || !strings.Contains(err.Error(), "DeadlineExceeded") {
		t.Fatalf("error %v", err)
	}
}
