package convtest

import (
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// Case is one row of a configurator's table test: a change to the base VMI
// (VMI()) and Context (Context()), then either the error expected or what
// the schema-valid XML must and must not contain.
type Case struct {
	Name      string
	Emulation bool
	VMI       func(*v1.VirtualMachineInstance)
	Ctx       func(*facts.Context)
	Err       string   // substring of the expected error
	Contains  []string // substrings the XML must contain
	Absent    []string // substrings the XML must not contain
	Check     func(t *testing.T, dom *libvirtxml.Domain)
}

// Run runs the cases as subtests.
func Run(t *testing.T, cases []Case) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			vmi := VMI()
			if tc.VMI != nil {
				tc.VMI(vmi)
			}
			c := Context()
			c.Emulation = tc.Emulation
			if tc.Ctx != nil {
				tc.Ctx(c)
			}
			dom, err := converter.Convert(vmi, c)
			if !CheckErr(t, err, tc.Err) {
				return
			}
			doc := Validate(t, dom)
			for _, s := range tc.Contains {
				if !strings.Contains(doc, s) {
					t.Errorf("XML lacks %s", s)
				}
			}
			for _, s := range tc.Absent {
				if strings.Contains(doc, s) {
					t.Errorf("XML has %s", s)
				}
			}
			if tc.Check != nil {
				tc.Check(t, dom)
			}
			if t.Failed() {
				t.Logf("XML:\n%s", doc)
			}
		})
	}
}
