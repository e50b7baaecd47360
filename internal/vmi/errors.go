package vmi

import (
	"errors"
	"fmt"
)

// FieldError is one problem with one field of a manifest. Path is the field
// path inside the document as the user wrote it, e.g.
// `spec.domain.devices.disks[0].bus` (for a VirtualMachine it starts with
// `spec.template.spec`).
type FieldError struct {
	Path   string
	Reason string
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Reason
	}
	return e.Path + ": " + e.Reason
}

func fieldErr(path, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// FieldErrors returns every FieldError inside err (which may be a join of
// several), so callers can report them one per line.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if fe, ok := err.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		walk(errors.Unwrap(err))
	}
	walk(err)
	return out
}
