package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// translator measures converter.Convert on one manifest loaded once, with
// and without marshalling the XML (the launcher does both on every Sync that
// defines).
func translator(r *results, path string, runs int) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	v, err := vmi.Load(data, vmi.Options{})
	if err != nil {
		return err
	}
	c := facts.Default(layout.Default())
	if _, err := converter.Convert(v, c); err != nil {
		return fmt.Errorf("convert %s: %w", path, err)
	}
	var failed error
	convert := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := converter.Convert(v, c); err != nil {
				failed = err
				b.FailNow()
			}
		}
	}
	marshal := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d, err := converter.Convert(v, c)
			if err == nil {
				_, err = d.Marshal()
			}
			if err != nil {
				failed = err
				b.FailNow()
			}
		}
	}
	for i := 0; i < runs; i++ {
		res := testing.Benchmark(convert)
		if failed != nil {
			return failed
		}
		r.add("translator.convert_per_s", perSecond(res))
		r.add("translator.convert_allocs", float64(res.AllocsPerOp()))
		r.add("translator.convert_bytes", float64(res.AllocedBytesPerOp()))
		res = testing.Benchmark(marshal)
		if failed != nil {
			return failed
		}
		r.add("translator.marshal_per_s", perSecond(res))
		r.add("translator.marshal_allocs", float64(res.AllocsPerOp()))
	}
	return nil
}

func perSecond(res testing.BenchmarkResult) float64 {
	if res.N == 0 || res.T == 0 {
		return 0
	}
	return float64(res.N) / res.T.Seconds()
}
