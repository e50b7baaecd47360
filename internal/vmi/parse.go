package vmi

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/manifest"
)

// MaxManifestBytes bounds the input Parse accepts. A VMI with the largest
// cloud-init payloads we allow is far below it.
const MaxManifestBytes = manifest.MaxBytes

const (
	kindVMI = "VirtualMachineInstance"
	kindVM  = "VirtualMachine"
	group   = "kubevirt.io"
)

// servedVersions are the kubevirt.io API versions whose VMI/VM schema is the
// one kubevirt.io/api/core/v1 describes (v1alpha3 is served by KubeVirt as
// an alias of v1).
var servedVersions = map[string]bool{"v1": true, "v1alpha3": true}

// Parse reads YAML or JSON: a VirtualMachineInstance, or a VirtualMachine
// (its spec.template becomes the VMI; name, namespace, labels and
// annotations come from the VM when the template has none).
//
// Decoding is strict: unknown fields, duplicate fields and wrong types are
// errors naming the field path. A document of another kind (or an apiVersion
// outside kubevirt.io) is an error naming `kind`. An empty apiVersion and
// kind is read as a VMI, which is what virt-handler sends. A YAML stream may
// hold several `---` documents, but exactly one object.
func Parse(data []byte) (*v1.VirtualMachineInstance, error) {
	vmi, _, err := parse(data, false, Options{})
	return vmi, err
}

// ParseLenient is Parse, except that fields unknown to kubevirt.io/api
// v1.9.0 are dropped, not rejected; their paths are returned so the caller
// can log them. Meant for VMI JSON from a virt-handler that may be newer
// than the API types compiled in here (KubeVirt's own launcher decodes it
// leniently too). Wrong types, duplicate fields and hostile quantities are
// still errors.
func ParseLenient(data []byte) (vmi *v1.VirtualMachineInstance, ignored []string, err error) {
	return parse(data, true, Options{})
}

func parse(data []byte, lenient bool, o Options) (*v1.VirtualMachineInstance, []string, error) {
	if len(data) > MaxManifestBytes {
		return nil, nil, fmt.Errorf("manifest is %d bytes, more than the %d allowed", len(data), MaxManifestBytes)
	}
	doc, err := singleDocument(data)
	if err != nil {
		return nil, nil, err
	}
	tree, err := parseTree(doc)
	if err != nil {
		return nil, nil, err
	}
	root, ok := tree.(*object)
	if !ok {
		return nil, nil, fmt.Errorf("manifest is a %s, not an object", describe(tree))
	}

	kind, err := kindOf(root)
	if err != nil {
		return nil, nil, err
	}
	c := newChecker()
	c.lenient = lenient
	switch kind {
	case kindVMI:
		out := &v1.VirtualMachineInstance{}
		if err := c.decode(root, out); err != nil {
			return nil, nil, err
		}
		out.APIVersion = v1.SchemeGroupVersion.String()
		out.Kind = kindVMI
		return out, c.ignored, nil
	default: // kindVM
		vm := &v1.VirtualMachine{}
		if err := c.decode(root, vm); err != nil {
			return nil, nil, err
		}
		out, err := vmiFromVM(vm, o)
		return out, c.ignored, err
	}
}

// singleDocument turns the input into the JSON of its one object.
func singleDocument(data []byte) ([]byte, error) {
	docs, err := manifest.Split(data)
	if err != nil {
		return nil, err
	}
	if len(docs) > 1 {
		return nil, fmt.Errorf("manifest holds %d objects; want exactly one VirtualMachineInstance or VirtualMachine", len(docs))
	}
	return docs[0], nil
}

// kindOf reads apiVersion and kind and says which of the two kinds we accept
// the document is.
func kindOf(root *object) (string, error) {
	str := func(key string) (string, error) {
		v, ok := root.vals[key]
		if !ok || v == nil {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", fieldErr(key, "wrong type: expected string, got %s", describe(v))
		}
		return s, nil
	}
	apiVersion, err := str("apiVersion")
	if err != nil {
		return "", err
	}
	kind, err := str("kind")
	if err != nil {
		return "", err
	}
	if kind == "" {
		if apiVersion != "" {
			return "", fieldErr("kind", "required when apiVersion (%q) is set", apiVersion)
		}
		return kindVMI, nil // virt-handler's VMI JSON carries no type meta
	}
	if kind != kindVMI && kind != kindVM {
		return "", fieldErr("kind", "%q (apiVersion %q) is not supported: want %s or %s of %s/v1",
			kind, apiVersion, kindVMI, kindVM, group)
	}
	if apiVersion != "" {
		g, ver, found := strings.Cut(apiVersion, "/")
		if !found || g != group || !servedVersions[ver] {
			return "", fieldErr("kind", "%s of apiVersion %q is not supported: want %s/v1", kind, apiVersion, group)
		}
	}
	return kind, nil
}

// decode checks tree against out's type and then decodes it into out. What
// is decoded is the checked tree re-encoded (so in lenient mode the dropped
// fields are really gone, and encoding/json's case-insensitive matching
// never sees an unchecked key).
func (c *checker) decode(tree *object, out any) error {
	c.check("", tree, reflect.TypeOf(out))
	if len(c.errs) > 0 {
		return errors.Join(c.errs...)
	}
	doc, err := json.Marshal(tree)
	if err != nil {
		return fmt.Errorf("re-encode: %w", err)
	}
	if err := json.Unmarshal(doc, out); err != nil {
		// The check above mirrors encoding/json; reaching here is a gap in it.
		return fmt.Errorf("decode: %w", err)
	}
	return nil
}

// vmiFromVM builds the VMI a VirtualMachine would start, its instancetype
// and preference expanded by o.Expander.
func vmiFromVM(vm *v1.VirtualMachine, o Options) (*v1.VirtualMachineInstance, error) {
	var errs []error
	if o.Expander == nil {
		if vm.Spec.Instancetype != nil {
			errs = append(errs, fieldErr("spec.instancetype",
				"instancetypes are expanded by a KubeVirt cluster (virt-api); expand it first"))
		}
		if vm.Spec.Preference != nil {
			errs = append(errs, fieldErr("spec.preference",
				"preferences are expanded by a KubeVirt cluster (virt-api); expand it first"))
		}
	}
	if vm.Spec.Template == nil {
		errs = append(errs, fieldErr("spec.template", "required: a VirtualMachine needs a template"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out := templateVMI(vm)
	if o.Expander != nil && (vm.Spec.Instancetype != nil || vm.Spec.Preference != nil) {
		if err := expand(vm, out, o); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// expand runs the Expander in the order of KubeVirt's VM controller: the
// early preferences, then the auto-attached input device and pod
// interface, then the instancetype and the rest of the preference.
func expand(vm *v1.VirtualMachine, out *v1.VirtualMachineInstance, o Options) error {
	if err := o.Expander.Prepare(vm, &out.Spec); err != nil {
		return err
	}
	autoAttachInput(&out.Spec)
	setDefaultNetwork(&out.Spec, o)
	return o.Expander.Apply(vm, out)
}

// templateVMI is the VMI of a VM's template, named after the VM.
func templateVMI(vm *v1.VirtualMachine) *v1.VirtualMachineInstance {
	t := vm.Spec.Template
	out := &v1.VirtualMachineInstance{
		TypeMeta:   vm.TypeMeta,
		ObjectMeta: *t.ObjectMeta.DeepCopy(),
		Spec:       *t.Spec.DeepCopy(),
	}
	out.APIVersion = v1.SchemeGroupVersion.String()
	out.Kind = kindVMI
	if out.Name == "" {
		out.Name = vm.Name
	}
	if out.Namespace == "" {
		out.Namespace = vm.Namespace
	}
	if len(out.Labels) == 0 && len(vm.Labels) > 0 {
		out.Labels = copyMap(vm.Labels)
	}
	if len(out.Annotations) == 0 && len(vm.Annotations) > 0 {
		out.Annotations = copyMap(vm.Annotations)
	}
	return out
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
