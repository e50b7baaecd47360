package converter_test

import (
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestConvertMinimal(t *testing.T) {
	for _, emu := range []bool{false, true} {
		c := convtest.Context()
		c.Emulation = emu
		dom, err := converter.Convert(convtest.VMI(), c)
		if err != nil {
			t.Fatal(err)
		}
		s := convtest.Validate(t, dom)
		t.Log(s)
	}
}
