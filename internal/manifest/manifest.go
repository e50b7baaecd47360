// Package manifest reads what `vlctl run` is given the way `kubectl apply
// -f` takes it: one or more files, each one JSON object or a stream of
// `---`-separated YAML documents, a v1 List standing for its items. It sorts the objects by kind: exactly one
// VirtualMachine or VirtualMachineInstance, the ConfigMaps and Secrets that
// back its configMap and secret volumes, and the instancetypes and
// preferences it may name (left to internal/instancetype). Decoding the VM
// itself stays with internal/vmi, which gets the one document's JSON.
package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// MaxBytes bounds one file (and one document). A VM with the largest
// cloud-init payloads allowed is far below it.
const MaxBytes = 8 << 20

// Kinds this package sorts the documents into.
const (
	KindVM        = "VirtualMachine"
	KindVMI       = "VirtualMachineInstance"
	KindConfigMap = "ConfigMap"
	KindSecret    = "Secret"
)

// Doc is one object of the input.
type Doc struct {
	// Origin says where it came from: the file, and the document's number
	// when the file holds more than one.
	Origin          string
	APIVersion      string
	Kind            string
	Name, Namespace string
	// JSON is the object, converted from YAML when it was YAML.
	JSON []byte
}

func (d Doc) String() string {
	if d.Name == "" {
		return fmt.Sprintf("%s (%s)", d.Origin, d.Kind)
	}
	return fmt.Sprintf("%s (%s %s)", d.Origin, d.Kind, d.Name)
}

// Split turns a file's contents into the JSON of each of its objects:
// JSON is one object, YAML a stream of documents, of which empty ones (such
// as before a leading ---) are skipped.
func Split(data []byte) ([][]byte, error) {
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("manifest is %d bytes, more than the %d allowed", len(data), MaxBytes)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("manifest is empty")
	}
	if trimmed[0] == '{' && json.Valid(trimmed) {
		return [][]byte{trimmed}, nil // JSON, as virt-handler sends it; parsed as is
	}
	var docs [][]byte
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for n := 1; ; n++ {
		chunk, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read YAML document %d: %w", n, err)
		}
		js, err := yaml.YAMLToJSONStrict(chunk)
		if err != nil {
			return nil, fmt.Errorf("YAML document %d: %w", n, err)
		}
		if s := string(bytes.TrimSpace(js)); s == "null" || s == "" {
			continue
		}
		docs = append(docs, js)
	}
	if len(docs) == 0 {
		return nil, errors.New("manifest holds no object")
	}
	return docs, nil
}

// ReadFiles reads every object of the files, in order.
func ReadFiles(paths []string) ([]Doc, error) {
	if len(paths) == 0 {
		return nil, errors.New("no manifest given: name a FILE or -f FILE")
	}
	var out []Doc
	for _, p := range paths {
		docs, err := readFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, docs...)
	}
	return out, nil
}

// Stdin is the file name that stands for the standard input (-f -, as
// kubectl apply takes it). The caller makes its standard input a regular
// file first (vlctl: a sealed memfd of what it read), so that it reads the
// same bytes each time the manifest is loaded.
const Stdin = "-"

func readFile(path string) ([]Doc, error) {
	open := path
	if path == Stdin {
		open, path = "/proc/self/fd/0", "stdin"
	}
	// Non-blocking, so that a FIFO given by mistake is refused below
	// instead of waiting for a writer.
	f, err := os.OpenFile(open, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("load %s: not a regular file (%s)", path, st.Mode().Type())
	}
	// One byte more than allowed tells a file that is too big.
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("load %s: file is more than the %d bytes allowed", path, MaxBytes)
	}
	raw, err := Split(data)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	docs := make([]Doc, 0, len(raw))
	for i, js := range raw {
		d := Doc{Origin: path, JSON: js}
		if len(raw) > 1 {
			d.Origin = fmt.Sprintf("%s document %d", path, i+1)
		}
		if err := d.readMeta(); err != nil {
			return nil, fmt.Errorf("load %s: %w", d.Origin, err)
		}
		if d.Kind == "List" && coreGroup(d.APIVersion) {
			items, err := listItems(d)
			if err != nil {
				return nil, fmt.Errorf("load %s: %w", d.Origin, err)
			}
			docs = append(docs, items...)
			continue
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// listItems are the objects of a v1 List, what `kubectl get -o yaml`
// writes for several objects.
func listItems(list Doc) ([]Doc, error) {
	var l struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   json.RawMessage   `json:"metadata"`
		Items      []json.RawMessage `json:"items"`
	}
	dec := json.NewDecoder(bytes.NewReader(list.JSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("kind List: %w", err)
	}
	out := make([]Doc, 0, len(l.Items))
	for i, js := range l.Items {
		d := Doc{Origin: fmt.Sprintf("%s items[%d]", list.Origin, i), JSON: js}
		if err := d.readMeta(); err != nil {
			return nil, fmt.Errorf("items[%d]: %w", i, err)
		}
		if d.Kind == "List" {
			return nil, fmt.Errorf("items[%d]: a List in a List", i)
		}
		out = append(out, d)
	}
	return out, nil
}

// readMeta fills the type and object meta from the JSON. Wrong types are
// left for the strict decoding of the kind to name; here they only make
// the fields empty.
func (d *Doc) readMeta() error {
	var head struct {
		APIVersion any `json:"apiVersion"`
		Kind       any `json:"kind"`
		Metadata   any `json:"metadata"`
	}
	if err := json.Unmarshal(d.JSON, &head); err != nil {
		return fmt.Errorf("not an object: %w", err)
	}
	d.APIVersion, _ = head.APIVersion.(string)
	d.Kind, _ = head.Kind.(string)
	if m, ok := head.Metadata.(map[string]any); ok {
		d.Name, _ = m["name"].(string)
		d.Namespace, _ = m["namespace"].(string)
	}
	return nil
}

// Set is the input sorted by kind.
type Set struct {
	// Main is the one VirtualMachine or VirtualMachineInstance.
	Main       Doc
	ConfigMaps []ConfigMap
	Secrets    []Secret
	// Others are the documents of the kinds the caller accepts (Sort's
	// others), in input order.
	Others []Doc
	// Files are the files read, for errors that concern all of them.
	Files []string
}

// Sort sorts docs (read from files) into a Set. others says which further
// kinds the caller takes (by kind); any other kind is an error naming the
// document.
func Sort(files []string, docs []Doc, others func(kind string) bool) (*Set, error) {
	s := &Set{Files: files}
	var mains []Doc
	var errs []error
	for _, d := range docs {
		switch {
		case d.Kind == KindVM || d.Kind == KindVMI || (d.Kind == "" && d.APIVersion == ""):
			// An object without type meta is a VMI, as virt-handler sends it.
			mains = append(mains, d)
		case d.Kind == KindConfigMap && coreGroup(d.APIVersion):
			cm, err := decodeConfigMap(d)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", d.Origin, err))
				continue
			}
			s.ConfigMaps = append(s.ConfigMaps, cm)
		case d.Kind == KindSecret && coreGroup(d.APIVersion):
			sec, err := decodeSecret(d)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", d.Origin, err))
				continue
			}
			s.Secrets = append(s.Secrets, sec)
		case others != nil && others(d.Kind):
			s.Others = append(s.Others, d)
		default:
			errs = append(errs, fmt.Errorf("%s: kind: %q (apiVersion %q) is not something vlctl run uses: want one %s or %s, and %ss, %ss, instancetypes and preferences it refers to",
				d.Origin, d.Kind, d.APIVersion, KindVM, KindVMI, KindConfigMap, KindSecret))
		}
	}
	switch len(mains) {
	case 0:
		errs = append(errs, fmt.Errorf("%s: no %s or %s among the documents; want exactly one",
			strings.Join(files, ", "), KindVM, KindVMI))
	case 1:
		s.Main = mains[0]
	default:
		names := make([]string, len(mains))
		for i, d := range mains {
			names[i] = d.String()
		}
		errs = append(errs, fmt.Errorf("the documents hold %d objects that are VMs: %s; want exactly one %s or %s",
			len(mains), strings.Join(names, ", "), KindVM, KindVMI))
	}
	if err := s.checkDuplicates(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// coreGroup says whether apiVersion is Kubernetes' core group.
func coreGroup(apiVersion string) bool { return apiVersion == "v1" }

func (s *Set) checkDuplicates() error {
	seen := map[string]string{}
	var errs []error
	add := func(kind string, d Doc) {
		key := kind + "/" + d.Namespace + "/" + d.Name
		if first, ok := seen[key]; ok {
			errs = append(errs, fmt.Errorf("%s: %s %q is given twice (first in %s)", d.Origin, kind, d.Name, first))
			return
		}
		seen[key] = d.Origin
	}
	for _, c := range s.ConfigMaps {
		add(KindConfigMap, c.Doc)
	}
	for _, c := range s.Secrets {
		add(KindSecret, c.Doc)
	}
	return errors.Join(errs...)
}

// Read is ReadFiles and Sort.
func Read(files []string, others func(kind string) bool) (*Set, error) {
	docs, err := ReadFiles(files)
	if err != nil {
		return nil, err
	}
	return Sort(files, docs, others)
}

// inNamespace says whether an object of namespace ns serves a VM of
// namespace vmNS: an object (or VM) that names none goes with any, as
// kubectl apply puts both into the same default namespace.
func inNamespace(ns, vmNS string) bool { return ns == "" || vmNS == "" || ns == vmNS }
