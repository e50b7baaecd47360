// Command instancetypeapply runs KubeVirt's own instancetype and preference
// expansion (kubevirt.io/kubevirt v1.8.2's pkg/instancetype, the code its
// VM admission webhook and VM controller run) over cases read as JSON from
// stdin, and writes the VMIs, or the conflicts and errors, as JSON to
// stdout. internal/instancetype's TestAgainstKubeVirt compares ours with
// it. It lives in this module so the main go.mod stays free of KubeVirt's
// dependencies.
//
// For each case, in the order KubeVirt runs them: the preferred
// architecture and machine type the VM admission mutator sets, the spread
// and requirement checks of VM admission, the auto-attach preferences and
// then the annotations and the apply of the VM controller. The machine
// type step is restated here (KubeVirt's is unexported): the preference's
// machine type when the VM has none.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfield "k8s.io/apimachinery/pkg/util/validation/field"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kubevirt.io/kubevirt/pkg/instancetype/annotations"
	"kubevirt.io/kubevirt/pkg/instancetype/apply"
	preferenceannotations "kubevirt.io/kubevirt/pkg/instancetype/preference/annotations"
	preferenceapply "kubevirt.io/kubevirt/pkg/instancetype/preference/apply"
	"kubevirt.io/kubevirt/pkg/instancetype/preference/requirements"
	"kubevirt.io/kubevirt/pkg/instancetype/preference/validation"
)

// Case is one VM with the instancetype and preference specs its matchers
// name (nil when it names none).
type Case struct {
	Name         string                                  `json:"name"`
	VM           virtv1.VirtualMachine                   `json:"vm"`
	Instancetype *v1beta1.VirtualMachineInstancetypeSpec `json:"instancetype,omitempty"`
	Preference   *v1beta1.VirtualMachinePreferenceSpec   `json:"preference,omitempty"`
}

// Result is the VMI KubeVirt would start, or why it would not.
type Result struct {
	Name        string                             `json:"name"`
	Annotations map[string]string                  `json:"annotations,omitempty"`
	Spec        *virtv1.VirtualMachineInstanceSpec `json:"spec,omitempty"`
	Conflicts   []string                           `json:"conflicts,omitempty"`
	Error       string                             `json:"error,omitempty"`
	// Panic is set when KubeVirt's code panicked on the case (a preference
	// with CPU features for a VM with no spec.domain.cpu and no
	// instancetype dereferences the nil CPU).
	Panic string `json:"panic,omitempty"`
}

func main() {
	var cases []Case
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		fmt.Fprintln(os.Stderr, "instancetypeapply: read cases:", err)
		os.Exit(2)
	}
	out := make([]Result, 0, len(cases))
	for _, c := range cases {
		out = append(out, run(c))
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "instancetypeapply:", err)
		os.Exit(1)
	}
}

func run(c Case) (r Result) {
	r.Name = c.Name
	defer func() {
		if p := recover(); p != nil {
			r = Result{Name: c.Name, Panic: fmt.Sprint(p)}
		}
	}()
	vm := c.VM.DeepCopy()
	spec := &vm.Spec.Template.Spec
	// VM admission: mutator, then admitter's checks.
	preferenceapply.ApplyArchitecturePreferences(c.Preference, spec)
	if p := c.Preference; p != nil && p.Machine != nil && p.Machine.PreferredMachineType != "" &&
		(spec.Domain.Machine == nil || spec.Domain.Machine.Type == "") {
		if spec.Domain.Machine == nil {
			spec.Domain.Machine = &virtv1.Machine{}
		}
		spec.Domain.Machine.Type = p.Machine.PreferredMachineType
	}
	if conflict := validation.CheckSpreadCPUTopology(c.Instancetype, c.Preference); conflict != nil {
		r.Error = conflict.Error()
		return r
	}
	if c.Preference != nil {
		preferenceapply.ApplyAutoAttachPreferences(c.Preference, spec)
	}
	// VM controller: the VMI from the template, annotated and applied.
	meta := vm.Spec.Template.ObjectMeta.DeepCopy()
	if conflicts, err := requirements.New().Check(c.Instancetype, c.Preference, spec); err != nil {
		r.Error = err.Error()
		for _, cf := range conflicts {
			r.Conflicts = append(r.Conflicts, cf.String())
		}
		return r
	}
	annotations.Set(vm, meta)
	preferenceannotations.Set(vm, meta)
	conflicts := apply.NewVMIApplier().ApplyToVMI(k8sfield.NewPath("spec", "template", "spec"),
		c.Instancetype, c.Preference, spec, (*metav1.ObjectMeta)(meta))
	if len(conflicts) > 0 {
		for _, cf := range conflicts {
			r.Conflicts = append(r.Conflicts, cf.String())
		}
		return r
	}
	r.Annotations, r.Spec = meta.Annotations, spec
	return r
}
