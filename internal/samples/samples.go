// Package samples summarises repeated measurements the way every figure
// of ours is reported (bench/, the e2e's start-time comparison): the
// median, the p95 by nearest rank, the extremes. Shared machines scatter
// timings; the median of several runs is what a figure means.
package samples

import (
	"math"
	"sort"
)

// Summary of a set of samples.
type Summary struct {
	N                     int
	Median, P95, Min, Max float64
}

// Summarize summarises xs (left unchanged); the zero Summary for none.
func Summarize(xs []float64) Summary {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return Summary{}
	}
	sum := Summary{N: n, Min: s[0], Max: s[n-1]}
	if n%2 == 1 {
		sum.Median = s[n/2]
	} else {
		sum.Median = (s[n/2-1] + s[n/2]) / 2
	}
	rank := int(math.Ceil(0.95*float64(n))) - 1
	sum.P95 = s[max(rank, 0)]
	return sum
}
