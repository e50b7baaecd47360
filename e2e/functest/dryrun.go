package functest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// DryRunSpecs returns the full texts (container texts and the leaf's,
// space-joined: what ginkgo's --focus matches) of the specs a ginkgo
// dry run (--ginkgo.dry-run --ginkgo.json-report) selected, in its order.
func DryRunSpecs(report []byte) ([]string, error) {
	var suites []struct {
		SpecReports []struct {
			ContainerHierarchyTexts []string
			LeafNodeText            string
			LeafNodeType            string
			State                   string
		}
	}
	if err := json.Unmarshal(report, &suites); err != nil {
		return nil, fmt.Errorf("ginkgo JSON report: %w", err)
	}
	var texts []string
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			if sp.LeafNodeType != "It" || sp.State != "passed" {
				continue
			}
			texts = append(texts, strings.Join(append(append([]string{}, sp.ContainerHierarchyTexts...), sp.LeafNodeText), " "))
		}
	}
	if len(texts) == 0 {
		return nil, fmt.Errorf("ginkgo JSON report: the dry run selected no spec")
	}
	return texts, nil
}
