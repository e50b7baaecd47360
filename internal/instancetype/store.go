// Package instancetype expands a VirtualMachine's instancetype and
// preference locally, as a KubeVirt cluster does when it starts the VM's
// VMI (KubeVirt v1.9.0's pkg/instancetype: the VM admission webhook's
// early preferences, then the VM controller's apply): the instancetype
// sets CPU, memory and what else it names, and a VM that sets the same is
// a conflict; the preference fills in only what the VM leaves unset.
//
// The instancetypes and preferences come from three sources, the first
// that has a name winning: the documents given to `vlctl run`, a directory
// (--instancetypes), and the common cluster instancetypes and preferences
// shipped in common/ (docs/standalone.md, "Instancetypes and
// preferences").
package instancetype

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"kubevirt.io/api/instancetype/v1beta1"

	"github.com/virtlauncher/virtlauncher/internal/manifest"
)

// The kinds of instancetype.kubevirt.io/v1beta1 this package reads.
const (
	KindInstancetype        = "VirtualMachineInstancetype"
	KindClusterInstancetype = "VirtualMachineClusterInstancetype"
	KindPreference          = "VirtualMachinePreference"
	KindClusterPreference   = "VirtualMachineClusterPreference"
)

const apiVersion = "instancetype.kubevirt.io/v1beta1"

// IsKind says whether kind is one of the four kinds above: for
// manifest.Sort's others.
func IsKind(kind string) bool {
	switch kind {
	case KindInstancetype, KindClusterInstancetype, KindPreference, KindClusterPreference:
		return true
	}
	return false
}

//go:embed common/*.yaml
var commonFS embed.FS

type key struct{ kind, name string }

type entry struct {
	origin       string
	instancetype *v1beta1.VirtualMachineInstancetypeSpec
	preference   *v1beta1.VirtualMachinePreferenceSpec
}

// Store holds the instancetypes and preferences of every source.
type Store struct {
	// levels are the sources, first wins: documents, directory, common.
	levels []map[key]entry
}

// NewStore builds a store from the run's documents, the files of dir ("" for
// none) and the common data shipped here.
func NewStore(docs []manifest.Doc, dir string) (*Store, error) {
	s := &Store{}
	var errs []error
	add := func(docs []manifest.Doc) {
		level, err := decodeAll(docs)
		if err != nil {
			errs = append(errs, err)
		}
		s.levels = append(s.levels, level)
	}
	add(docs)
	if dir != "" {
		d, err := readDir(dir)
		if err != nil {
			errs = append(errs, err)
		}
		add(d)
	}
	c, err := commonDocs()
	if err != nil {
		errs = append(errs, err)
	}
	add(c)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// readDir reads every .yaml, .yml and .json file of dir (not below it);
// each document must be one of the four kinds.
func readDir(dir string) ([]manifest.Doc, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("--instancetypes %s: %w", dir, err)
	}
	var files []string
	for _, e := range ents {
		switch filepath.Ext(e.Name()) {
		case ".yaml", ".yml", ".json":
			if e.Type().IsRegular() {
				files = append(files, filepath.Join(dir, e.Name()))
			}
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("--instancetypes %s: no .yaml, .yml or .json file in it", dir)
	}
	docs, err := manifest.ReadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("--instancetypes: %w", err)
	}
	for _, d := range docs {
		if !IsKind(d.Kind) {
			return nil, fmt.Errorf("--instancetypes: %s: kind %q is not an instancetype or preference", d.Origin, d.Kind)
		}
	}
	return docs, nil
}

func commonDocs() ([]manifest.Doc, error) {
	names, err := fs.Glob(commonFS, "common/*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []manifest.Doc
	for _, n := range names {
		data, err := commonFS.ReadFile(n)
		if err != nil {
			return nil, err
		}
		raw, err := manifest.Split(data)
		if err != nil {
			return nil, fmt.Errorf("common data %s: %w", n, err)
		}
		for i, js := range raw {
			d := manifest.Doc{Origin: fmt.Sprintf("vlctl's common %s document %d", filepath.Base(n), i+1), JSON: js}
			var head struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(js, &head); err != nil {
				return nil, fmt.Errorf("%s: %w", d.Origin, err)
			}
			d.Kind, d.Name, d.APIVersion = head.Kind, head.Metadata.Name, apiVersion
			out = append(out, d)
		}
	}
	return out, nil
}

// decodeAll decodes docs strictly into one source level; a name given
// twice in the same level is an error.
func decodeAll(docs []manifest.Doc) (map[key]entry, error) {
	level := map[key]entry{}
	var errs []error
	for _, d := range docs {
		e, err := decode(d)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.Origin, err))
			continue
		}
		k := key{d.Kind, d.Name}
		if first, dup := level[k]; dup {
			errs = append(errs, fmt.Errorf("%s: %s %q is given twice (first in %s)", d.Origin, d.Kind, d.Name, first.origin))
			continue
		}
		level[k] = e
	}
	return level, errors.Join(errs...)
}

func decode(d manifest.Doc) (entry, error) {
	if d.APIVersion != apiVersion {
		return entry{}, fmt.Errorf("apiVersion: %q is not supported for %s: want %s", d.APIVersion, d.Kind, apiVersion)
	}
	if d.Name == "" {
		return entry{}, errors.New("metadata.name: required")
	}
	e := entry{origin: d.Origin}
	switch d.Kind {
	case KindInstancetype, KindClusterInstancetype:
		var it v1beta1.VirtualMachineInstancetype
		if err := strict(d.JSON, &it); err != nil {
			return entry{}, err
		}
		if it.Spec.CPU.Guest == 0 {
			return entry{}, errors.New("spec.cpu.guest: required, at least 1")
		}
		if it.Spec.Memory.Guest.IsZero() {
			return entry{}, errors.New("spec.memory.guest: required")
		}
		e.instancetype = &it.Spec
	case KindPreference, KindClusterPreference:
		var p v1beta1.VirtualMachinePreference
		if err := strict(d.JSON, &p); err != nil {
			return entry{}, err
		}
		if p.Spec.CPU != nil && p.Spec.CPU.PreferredCPUTopology != nil && !knownTopology(*p.Spec.CPU.PreferredCPUTopology) {
			return entry{}, fmt.Errorf("spec.cpu.preferredCPUTopology: %q is not supported", *p.Spec.CPU.PreferredCPUTopology)
		}
		e.preference = &p.Spec
	default:
		return entry{}, fmt.Errorf("kind: %q is not an instancetype or preference", d.Kind)
	}
	return e, nil
}

func strict(js []byte, out any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return err
	}
	return nil
}

func knownTopology(t v1beta1.PreferredCPUTopology) bool {
	switch t {
	case v1beta1.DeprecatedPreferSockets, v1beta1.DeprecatedPreferCores, v1beta1.DeprecatedPreferThreads,
		v1beta1.DeprecatedPreferSpread, v1beta1.DeprecatedPreferAny,
		v1beta1.Sockets, v1beta1.Cores, v1beta1.Threads, v1beta1.Spread, v1beta1.Any:
		return true
	}
	return false
}

// find looks kind/name up, first source first.
func (s *Store) find(kind, name string) (entry, bool) {
	for _, l := range s.levels {
		if e, ok := l[key{kind, name}]; ok {
			return e, true
		}
	}
	return entry{}, false
}

// names lists the names of kind every source has, for errors.
func (s *Store) names(kind string) string {
	seen := map[string]bool{}
	for _, l := range s.levels {
		for k := range l {
			if k.kind == kind {
				seen[k.name] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
