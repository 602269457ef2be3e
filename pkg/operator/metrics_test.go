package operator

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	clustercontroller "github.com/carousel-dev/carousel/pkg/controller/cluster"
	"github.com/carousel-dev/carousel/pkg/controller/kubeletcsr"
)

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

// Every carousel_ series the chart's Grafana dashboard queries is one the manager exports: a renamed metric
// would otherwise leave an empty panel.
func TestTheDashboardQueriesMetricsTheManagerExports(t *testing.T) {
	exported := &describedNames{}
	clustercontroller.NewMetrics(exported)
	kubeletcsr.NewMetrics(exported)
	if len(exported.names) < 10 {
		t.Fatalf("the manager describes only %v", exported.names)
	}

	raw, err := os.ReadFile("../../charts/carousel/files/dashboards/carousel.json")
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
	used := regexp.MustCompile(`\bcarousel_[a-z_]+`)
	queried := 0
	for _, p := range dashboard.Panels {
		for _, target := range p.Targets {
			for _, name := range used.FindAllString(target.Expr, -1) {
				queried++
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if trimmed, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(exported.names, trimmed) {
						base = trimmed
					}
				}
				if !slices.Contains(exported.names, base) {
					t.Errorf("panel %q queries %s, which the manager does not export", p.Title, name)
				}
			}
		}
	}
	if queried == 0 {
		t.Fatal("the dashboard queries no carousel_ metric")
	}
}
