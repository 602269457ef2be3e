package rules

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const dashboardFile = "../../charts/carousel/files/dashboards/carousel.json"

// TestDashboardQueriesParse has promtool parse every query of the chart's Grafana dashboard, as recording rules
// with Grafana's variables replaced by what Grafana would put in their place. (pkg/operator's tests check that
// the carousel_ metrics they name exist.)
func TestDashboardQueriesParse(t *testing.T) {
	promtool := tool(t, "PROMTOOL")
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dashboard struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dashboard); err != nil {
		t.Fatal(err)
	}
	grafana := strings.NewReplacer("$__rate_interval", "1m", "$job", ".+", "$namespace", ".*", "$cluster", ".*")
	type recording struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []recording
	for i, p := range dashboard.Panels {
		for j, target := range p.Targets {
			if strings.Contains(grafana.Replace(target.Expr), "$") {
				t.Errorf("panel %q: a variable the dashboard does not define in %s", p.Title, target.Expr)
			}
			rules = append(rules, recording{Record: fmt.Sprintf("dashboard:panel%d:query%d", i, j), Expr: grafana.Replace(target.Expr)})
		}
	}
	if len(rules) < 10 {
		t.Fatalf("the dashboard has only %d queries", len(rules))
	}
	file, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.rules.yaml"), file, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, dir, promtool, "check", "rules", "dashboard.rules.yaml"); err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
}
