package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	v1 "kubevirt.io/api/core/v1"

	hooksv1alpha1 "github.com/virtlauncher/virtlauncher/api/hooks/v1alpha1"
	hooksv1alpha2 "github.com/virtlauncher/virtlauncher/api/hooks/v1alpha2"
	hooksv1alpha3 "github.com/virtlauncher/virtlauncher/api/hooks/v1alpha3"
	"github.com/virtlauncher/virtlauncher/internal/disks"
)

// OnDefineDomain passes the domain XML through every sidecar subscribed to
// OnDefineDomain, in order, and returns the last one's XML. Without such
// sidecars it returns domainXML unchanged.
func (m *Manager) OnDefineDomain(ctx context.Context, domainXML string, vmi *v1.VirtualMachineInstance) (string, error) {
	subs := m.subscribed(PointOnDefineDomain)
	if len(subs) == 0 {
		return domainXML, nil
	}
	vmiJSON, err := json.Marshal(vmi)
	if err != nil {
		return "", fmt.Errorf("OnDefineDomain: marshal VMI: %w", err)
	}
	cur := []byte(domainXML)
	for _, s := range subs {
		var out []byte
		err := s.call(ctx, PointOnDefineDomain, func(ctx context.Context, conn *grpc.ClientConn) error {
			var err error
			switch s.Version {
			case V1alpha1:
				var r *hooksv1alpha1.OnDefineDomainResult
				r, err = hooksv1alpha1.NewCallbacksClient(conn).OnDefineDomain(ctx, &hooksv1alpha1.OnDefineDomainParams{DomainXML: cur, Vmi: vmiJSON})
				out = r.GetDomainXML()
			case V1alpha2:
				var r *hooksv1alpha2.OnDefineDomainResult
				r, err = hooksv1alpha2.NewCallbacksClient(conn).OnDefineDomain(ctx, &hooksv1alpha2.OnDefineDomainParams{DomainXML: cur, Vmi: vmiJSON})
				out = r.GetDomainXML()
			default:
				var r *hooksv1alpha3.OnDefineDomainResult
				r, err = hooksv1alpha3.NewCallbacksClient(conn).OnDefineDomain(ctx, &hooksv1alpha3.OnDefineDomainParams{DomainXML: cur, Vmi: vmiJSON})
				out = r.GetDomainXML()
			}
			return err
		})
		if err != nil {
			return "", err
		}
		if len(bytes.TrimSpace(out)) == 0 {
			return "", fmt.Errorf("%s: OnDefineDomain: returned an empty domain XML", s)
		}
		m.log.Info("OnDefineDomain hook applied", "sidecar", s.Name, "socket", s.Socket, "changed", !bytes.Equal(out, cur))
		cur = out
	}
	return string(cur), nil
}

// PreCloudInitIso gives the cloud-init data to the first sidecar subscribed
// to PreCloudInitIso that speaks v1alpha2 or v1alpha3 and returns what it
// answers; KubeVirt v1.9 calls no other. A complete cloudInitData answer
// is used as it is; otherwise the user and network data of its
// cloudInitNoCloudSource answer replace the originals (the older form),
// with the meta-data left to the ISO writer's minimal one.
func (m *Manager) PreCloudInitIso(ctx context.Context, vmi *v1.VirtualMachineInstance, data *disks.CloudInitData) (*disks.CloudInitData, error) {
	var s *Sidecar
	for _, c := range m.subscribed(PointPreCloudInitIso) {
		if c.Version == V1alpha1 {
			m.log.Warn("hook sidecar subscribes to PreCloudInitIso but speaks only v1alpha1; not called", "sidecar", c.Name, "socket", c.Socket)
			continue
		}
		if s == nil {
			s = c
			continue
		}
		m.log.Warn("only the first PreCloudInitIso hook sidecar is called, as in KubeVirt", "called", s.Name, "skipped", c.Name, "socket", c.Socket)
	}
	if s == nil || data == nil {
		return data, nil
	}
	vmiJSON, err := json.Marshal(vmi)
	if err != nil {
		return nil, fmt.Errorf("PreCloudInitIso: marshal VMI: %w", err)
	}
	dataJSON, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("PreCloudInitIso: marshal cloud-init data: %w", err)
	}
	legacyJSON, err := json.Marshal(v1.CloudInitNoCloudSource{UserData: data.UserData, NetworkData: data.NetworkData})
	if err != nil {
		return nil, fmt.Errorf("PreCloudInitIso: marshal cloud-init source: %w", err)
	}
	var outData, outLegacy []byte
	err = s.call(ctx, PointPreCloudInitIso, func(ctx context.Context, conn *grpc.ClientConn) error {
		if s.Version == V1alpha2 {
			r, err := hooksv1alpha2.NewCallbacksClient(conn).PreCloudInitIso(ctx, &hooksv1alpha2.PreCloudInitIsoParams{
				CloudInitData: dataJSON, CloudInitNoCloudSource: legacyJSON, Vmi: vmiJSON})
			outData, outLegacy = r.GetCloudInitData(), r.GetCloudInitNoCloudSource()
			return err
		}
		r, err := hooksv1alpha3.NewCallbacksClient(conn).PreCloudInitIso(ctx, &hooksv1alpha3.PreCloudInitIsoParams{
			CloudInitData: dataJSON, CloudInitNoCloudSource: legacyJSON, Vmi: vmiJSON})
		outData, outLegacy = r.GetCloudInitData(), r.GetCloudInitNoCloudSource()
		return err
	})
	if err != nil {
		return nil, err
	}
	out, err := cloudInitResult(data.DataSource, outData, outLegacy)
	if err != nil {
		return nil, fmt.Errorf("%s: PreCloudInitIso: %w", s, err)
	}
	m.log.Info("PreCloudInitIso hook applied", "sidecar", s.Name, "socket", s.Socket)
	return out, nil
}

// cloudInitResult reads a PreCloudInitIso answer as KubeVirt does. (An
// empty cloudInitData, which KubeVirt fails to decode, is taken as absent,
// so a sidecar answering only in the older form works.)
func cloudInitResult(source string, data, legacy []byte) (*disks.CloudInitData, error) {
	var out *disks.CloudInitData
	if len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, &out); err != nil {
			return nil, fmt.Errorf("cloudInitData: %w", err)
		}
	}
	if out.Complete() {
		return out, nil
	}
	if len(bytes.TrimSpace(legacy)) == 0 {
		return nil, errors.New("answered neither complete cloudInitData (user data and meta-data) nor cloudInitNoCloudSource")
	}
	var src v1.CloudInitNoCloudSource
	if err := json.Unmarshal(legacy, &src); err != nil {
		return nil, fmt.Errorf("cloudInitNoCloudSource: %w", err)
	}
	return &disks.CloudInitData{DataSource: source, UserData: src.UserData, NetworkData: src.NetworkData}, nil
}

// Shutdown tells every sidecar subscribed to Shutdown (v1alpha3) that QEMU
// is gone, so it may exit. Unlike KubeVirt, which stops at the first
// failure, every sidecar is told; the errors are returned together.
func (m *Manager) Shutdown(ctx context.Context) error {
	var errs []error
	for _, s := range m.subscribed(PointShutdown) {
		if s.Version != V1alpha3 {
			m.log.Warn("hook sidecar subscribes to Shutdown but does not speak v1alpha3; not called", "sidecar", s.Name, "socket", s.Socket, "version", s.Version)
			continue
		}
		errs = append(errs, s.call(ctx, PointShutdown, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := hooksv1alpha3.NewCallbacksClient(conn).Shutdown(ctx, &hooksv1alpha3.ShutdownParams{})
			return err
		}))
	}
	return errors.Join(errs...)
}
