package converter_test

import (
	"os"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/corpus"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// BenchmarkConvertFedora converts vmi-fedora.yaml (already loaded) and
// marshals the XML, as the launcher does on every sync.
func BenchmarkConvertFedora(b *testing.B) {
	data, err := os.ReadFile(corpus.File(b, "vmi-fedora.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	v, err := vmi.Load(data, vmi.Options{})
	if err != nil {
		b.Fatal(err)
	}
	c := facts.Default(layout.Default())
	b.ReportAllocs()
	for b.Loop() {
		dom, err := converter.Convert(v, c)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := dom.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
}
