package instancetype

import (
	"errors"
	"fmt"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	itapi "kubevirt.io/api/instancetype"
	"kubevirt.io/api/instancetype/v1beta1"
)

// fieldBase is where KubeVirt's VM admission names the VM's fields in a
// conflict: the VMI spec of the VM's template.
const fieldBase = "spec.template.spec"

// Expander expands the instancetype and preference a VM names, from a
// Store. It implements vmi.Expander.
type Expander struct{ Store *Store }

// resolved is what a VM's matchers name.
type resolved struct {
	it       *v1beta1.VirtualMachineInstancetypeSpec
	itDesc   string
	pref     *v1beta1.VirtualMachinePreferenceSpec
	prefDesc string
}

// lookup finds the VM's instancetype and preference; a missing one, an
// unknown kind or a matcher we cannot follow is an error naming the field.
func (x Expander) lookup(vm *v1.VirtualMachine) (resolved, error) {
	var r resolved
	var errs []error
	if m := vm.Spec.Instancetype; m != nil {
		kind, err := matcherKind("spec.instancetype", m.Kind, m.Name, m.InferFromVolume, KindInstancetype, KindClusterInstancetype,
			itapi.SingularResourceName, itapi.PluralResourceName, itapi.ClusterSingularResourceName, itapi.ClusterPluralResourceName)
		if err == nil {
			e, ok := x.Store.find(kind, m.Name)
			if !ok {
				err = fmt.Errorf("spec.instancetype.name: %s %q not found among the documents, --instancetypes or vlctl's common instancetypes (%s has: %s)",
					kind, m.Name, kind, x.Store.names(kind))
			} else {
				r.it, r.itDesc = e.instancetype.DeepCopy(), fmt.Sprintf("%s %q (%s)", kind, m.Name, e.origin)
			}
		}
		errs = append(errs, err)
	}
	if m := vm.Spec.Preference; m != nil {
		kind, err := matcherKind("spec.preference", m.Kind, m.Name, m.InferFromVolume, KindPreference, KindClusterPreference,
			itapi.SingularPreferenceResourceName, itapi.PluralPreferenceResourceName, itapi.ClusterSingularPreferenceResourceName, itapi.ClusterPluralPreferenceResourceName)
		if err == nil {
			e, ok := x.Store.find(kind, m.Name)
			if !ok {
				err = fmt.Errorf("spec.preference.name: %s %q not found among the documents, --instancetypes or vlctl's common preferences (%s has: %s)",
					kind, m.Name, kind, x.Store.names(kind))
			} else {
				r.pref, r.prefDesc = e.preference.DeepCopy(), fmt.Sprintf("%s %q (%s)", kind, m.Name, e.origin)
			}
		}
		errs = append(errs, err)
	}
	return r, errors.Join(errs...)
}

// matcherKind says which kind a matcher names: as KubeVirt reads it, the
// kind in any case, singular or plural, and the cluster kind when empty.
func matcherKind(field, kind, name, infer, namespaced, cluster string, nsNames ...string) (string, error) {
	if infer != "" {
		return "", fmt.Errorf("%s.inferFromVolume: inferring from a volume's labels needs the cluster's volumes; name the %s instead", field, strings.TrimPrefix(field, "spec."))
	}
	if name == "" {
		return "", fmt.Errorf("%s.name: required", field)
	}
	switch strings.ToLower(kind) {
	case strings.ToLower(namespaced), nsNames[0], nsNames[1]:
		return namespaced, nil
	case "", strings.ToLower(cluster), nsNames[2], nsNames[3]:
		return cluster, nil
	}
	return "", fmt.Errorf("%s.kind: %q is not supported: want %s or %s", field, kind, namespaced, cluster)
}

// Prepare applies what KubeVirt applies before the VM's VMI is defaulted:
// the preferred architecture and machine type (VM admission) and the
// preferred auto-attached devices (the VM controller, before it adds the
// default interface and input device).
func (x Expander) Prepare(vm *v1.VirtualMachine, spec *v1.VirtualMachineInstanceSpec) error {
	r, err := x.lookup(vm)
	if err != nil {
		return err
	}
	p := r.pref
	if p == nil {
		return nil
	}
	if p.PreferredArchitecture != nil && *p.PreferredArchitecture != "" && spec.Architecture == "" {
		spec.Architecture = *p.PreferredArchitecture
	}
	if p.Machine != nil && p.Machine.PreferredMachineType != "" && (spec.Domain.Machine == nil || spec.Domain.Machine.Type == "") {
		if spec.Domain.Machine == nil {
			spec.Domain.Machine = &v1.Machine{}
		}
		spec.Domain.Machine.Type = p.Machine.PreferredMachineType
	}
	preferAutoAttach(p, spec)
	return nil
}

// Apply expands the VM's instancetype and preference into its VMI, as the
// VM controller does when it starts the VM, after the checks of VM
// admission (spread topology, the preference's requirements).
func (x Expander) Apply(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance) error {
	r, err := x.lookup(vm)
	if err != nil {
		return err
	}
	if r.it == nil && r.pref == nil {
		return nil
	}
	if err := checkSpread(r.it, r.pref); err != nil {
		return fmt.Errorf("spec.instancetype: %s with %s: %w", r.itDesc, r.prefDesc, err)
	}
	if err := checkRequirements(r.it, r.pref, &vmi.Spec); err != nil {
		return fmt.Errorf("%w (preference %s)", err, r.prefDesc)
	}
	setMatcherAnnotations(vm, &vmi.ObjectMeta)
	if conflicts := ApplySpecs(r.it, r.pref, &vmi.Spec, &vmi.ObjectMeta); len(conflicts) > 0 {
		return conflictError(conflicts, r.itDesc)
	}
	return nil
}

func conflictError(conflicts []string, itDesc string) error {
	errs := make([]error, len(conflicts))
	for i, c := range conflicts {
		errs[i] = fmt.Errorf("%s: set by the VM and by the instancetype %s; remove it from the VM (the instancetype decides it)", c, itDesc)
	}
	return errors.Join(errs...)
}

// setMatcherAnnotations names the instancetype and preference on the VMI,
// with KubeVirt's annotations (a cluster kind under its own key).
func setMatcherAnnotations(vm *v1.VirtualMachine, meta interface {
	GetAnnotations() map[string]string
	SetAnnotations(map[string]string)
}) {
	set := func(key, value string) {
		a := meta.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a[key] = value
		meta.SetAnnotations(a)
	}
	if m := vm.Spec.Instancetype; m != nil {
		if k, err := matcherKind("", m.Kind, "x", "", KindInstancetype, KindClusterInstancetype,
			itapi.SingularResourceName, itapi.PluralResourceName, itapi.ClusterSingularResourceName, itapi.ClusterPluralResourceName); err == nil {
			if k == KindInstancetype {
				set(v1.InstancetypeAnnotation, m.Name)
			} else {
				set(v1.ClusterInstancetypeAnnotation, m.Name)
			}
		}
	}
	if m := vm.Spec.Preference; m != nil {
		if k, err := matcherKind("", m.Kind, "x", "", KindPreference, KindClusterPreference,
			itapi.SingularPreferenceResourceName, itapi.PluralPreferenceResourceName, itapi.ClusterSingularPreferenceResourceName, itapi.ClusterPluralPreferenceResourceName); err == nil {
			if k == KindPreference {
				set(v1.PreferenceAnnotation, m.Name)
			} else {
				set(v1.ClusterPreferenceAnnotation, m.Name)
			}
		}
	}
}
