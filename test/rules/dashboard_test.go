package rules

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	campaigncontroller "github.com/carousel-dev/carousel/pkg/controller/campaign"
	clustercontroller "github.com/carousel-dev/carousel/pkg/controller/cluster"
	"github.com/carousel-dev/carousel/pkg/controller/kubeletcsr"
)

const dashboardFile = "../../charts/carousel/files/dashboards/carousel.json"

// dashboardQuery is a query of a panel of the chart's Grafana dashboard.
type dashboardQuery struct{ panel, expr string }

func dashboardQueries(t *testing.T) []dashboardQuery {
	t.Helper()
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
	var queries []dashboardQuery
	for _, p := range dashboard.Panels {
		for _, target := range p.Targets {
			queries = append(queries, dashboardQuery{panel: p.Title, expr: target.Expr})
		}
	}
	if len(queries) < 10 {
		t.Fatalf("the dashboard has only %d queries", len(queries))
	}
	return queries
}

// TestDashboardQueriesParse has promtool parse every query of the chart's Grafana dashboard, as recording rules
// with Grafana's variables replaced by what Grafana would put in their place.
func TestDashboardQueriesParse(t *testing.T) {
	promtool := tool(t, "PROMTOOL")
	grafana := strings.NewReplacer("$__rate_interval", "1m", "$job", ".+", "$namespace", ".*", "$cluster", ".*")
	type recording struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []recording
	for i, q := range dashboardQueries(t) {
		expr := grafana.Replace(q.expr)
		if strings.Contains(expr, "$") {
			t.Errorf("panel %q: a variable the dashboard does not define in %s", q.panel, q.expr)
		}
		rules = append(rules, recording{Record: fmt.Sprintf("dashboard:query%d", i), Expr: expr})
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

// describedNames records the names of the metrics collectors describe, whether or not they have series yet.
type describedNames struct{ names []string }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *describedNames) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names = append(r.names, m[1])
		}
	}
	return nil
}

func (r *describedNames) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *describedNames) Unregister(prometheus.Collector) bool { return true }

// TestQueriesNameMetricsTheManagerExports: every carousel_ series the dashboard and the alerts query is one the
// manager exports, so that renaming a metric cannot leave an empty panel or an alert that never fires.
func TestQueriesNameMetricsTheManagerExports(t *testing.T) {
	exported := &describedNames{}
	clustercontroller.NewMetrics(exported)
	campaigncontroller.NewMetrics(exported)
	kubeletcsr.NewMetrics(exported)
	if len(exported.names) < 10 {
		t.Fatalf("the manager describes only %v", exported.names)
	}
	queries := dashboardQueries(t)
	for _, r := range alerts(t, render(t)) {
		queries = append(queries, dashboardQuery{panel: "alert " + r.Alert, expr: r.Expr})
	}
	used := regexp.MustCompile(`\bcarousel_[a-z_]+`)
	named := 0
	for _, q := range queries {
		for _, name := range used.FindAllString(q.expr, -1) {
			named++
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if trimmed, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(exported.names, trimmed) {
					base = trimmed
				}
			}
			if !slices.Contains(exported.names, base) {
				t.Errorf("%s queries %s, which the manager does not export", q.panel, name)
			}
		}
	}
	if named == 0 {
		t.Fatal("no query names a carousel_ metric")
	}
}
