package samples

import "testing"

func TestSummarize(t *testing.T) {
	for _, c := range []struct {
		name string
		xs   []float64
		want Summary
	}{
		{"none", nil, Summary{}},
		{"one", []float64{7}, Summary{1, 7, 7, 7, 7}},
		{"even: the middle two's mean", []float64{4, 1, 3, 2}, Summary{4, 2.5, 4, 1, 4}},
		{"odd, unsorted", []float64{5, 1, 9, 3, 7}, Summary{5, 5, 9, 1, 9}},
		// nearest rank: ceil(0.95*20) = 19th of 20
		{"twenty", []float64{20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, Summary{20, 10.5, 19, 1, 20}},
	} {
		xs := append([]float64(nil), c.xs...)
		if got := Summarize(xs); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
		for i := range xs {
			if xs[i] != c.xs[i] {
				t.Errorf("%s: input reordered", c.name)
			}
		}
	}
}
