// Package rules tests the alerting rules of the Helm chart: the PrometheusRule
// helm renders goes through `promtool check rules` and through promtool's unit
// tests in testdata, which must cover every alert both firing and not, and
// every alert must point at its runbook in docs/runbooks; the Grafana
// dashboard's queries go through promtool's parser too. Run it with
// `make test-rules`, which builds the pinned helm and promtool and passes them
// in HELM and PROMTOOL.
package rules

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// rulesFile is the name under which the rendered rules are written next to
// the test files; every test file's rule_files names it.
const rulesFile = "carousel.rules.yaml"

// defaultRunbooks is where the chart's default runbookBaseURL points: this
// repository's docs/runbooks.
const defaultRunbooks = "https://github.com/carousel-dev/carousel/blob/main/docs/runbooks"

const runbookDir = "../../docs/runbooks"

type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type prometheusRule struct {
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

func tool(t *testing.T, env string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		t.Fatalf("%s is not set: run these tests with `make test-rules`, which builds helm and promtool", env)
	}
	return path
}

func run(t *testing.T, dir, name string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// render returns the chart's PrometheusRule as helm renders it with the rule
// enabled and the extra --set values.
func render(t *testing.T, set ...string) []byte {
	t.Helper()
	args := []string{"template", "carousel", "../../charts/carousel", "--namespace", "carousel-system",
		"--set", "metrics.prometheusRule.enabled=true", "--show-only", "templates/prometheusrule.yaml"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := run(t, ".", tool(t, "HELM"), args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return []byte(out)
}

func alerts(t *testing.T, rendered []byte) []rule {
	t.Helper()
	var pr prometheusRule
	if err := yaml.Unmarshal(rendered, &pr); err != nil {
		t.Fatal(err)
	}
	var all []rule
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Fatalf("group %s has a rule that is not an alert: %+v", g.Name, r)
			}
			all = append(all, r)
		}
	}
	if len(all) == 0 {
		t.Fatal("the PrometheusRule has no alert")
	}
	return all
}

// rulesFileOf is the spec of the PrometheusRule: a Prometheus rules file.
func rulesFileOf(t *testing.T, rendered []byte) []byte {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal(rendered, &obj); err != nil {
		t.Fatal(err)
	}
	spec, err := yaml.Marshal(obj["spec"])
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func testFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no test files in testdata")
	}
	return files
}

// TestRules runs promtool's lint and unit tests on the rules the chart renders
// with its defaults.
func TestRules(t *testing.T) {
	promtool := tool(t, "PROMTOOL")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, rulesFile), rulesFileOf(t, render(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, dir, promtool, "check", "rules", rulesFile); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	var names []string
	for _, f := range testFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, filepath.Base(f))
	}
	out, err := run(t, dir, promtool, append([]string{"test", "rules"}, names...)...)
	t.Logf("promtool test rules %s\n%s", strings.Join(names, " "), out)
	if err != nil {
		t.Fatalf("promtool test rules: %v", err)
	}
}

// TestEveryAlertIsTested: promtool passes a test that expects no alert of a
// name that does not exist, and does not ask for every alert to be tested;
// this does.
func TestEveryAlertIsTested(t *testing.T) {
	type testFile struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	firing, silent := map[string]bool{}, map[string]bool{}
	for _, f := range testFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tf testFile
		if err := yaml.Unmarshal(data, &tf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !slices.Equal(tf.RuleFiles, []string{rulesFile}) {
			t.Errorf("%s: rule_files is %q, want [%s]", f, tf.RuleFiles, rulesFile)
		}
		for _, tc := range tf.Tests {
			for _, at := range tc.AlertRuleTest {
				if len(at.ExpAlerts) > 0 {
					firing[at.Alertname] = true
				} else {
					silent[at.Alertname] = true
				}
			}
		}
	}
	known := map[string]bool{}
	for _, a := range alerts(t, render(t)) {
		known[a.Alert] = true
		if !firing[a.Alert] {
			t.Errorf("no test of %s expects it to fire", a.Alert)
		}
		if !silent[a.Alert] {
			t.Errorf("no test of %s expects it not to fire", a.Alert)
		}
	}
	for name := range firing {
		if !known[name] {
			t.Errorf("the tests expect an alert %s that the chart does not have", name)
		}
	}
	for name := range silent {
		if !known[name] {
			t.Errorf("the tests expect no alert %s, which the chart does not have: the test passes for nothing", name)
		}
	}
}

// TestRunbooks: every alert has a severity, a summary, a description and a
// runbook_url <runbookBaseURL>/<alert in lower case>.md whose page is in
// docs/runbooks and listed in its README; every page there is an alert's.
func TestRunbooks(t *testing.T) {
	index, err := os.ReadFile(filepath.Join(runbookDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string]bool{}
	for _, a := range alerts(t, render(t)) {
		page := strings.ToLower(a.Alert) + ".md"
		pages[page] = true
		if got, want := a.Annotations["runbook_url"], defaultRunbooks+"/"+page; got != want {
			t.Errorf("%s: runbook_url %q, want %q", a.Alert, got, want)
		}
		if _, err := os.Stat(filepath.Join(runbookDir, page)); err != nil {
			t.Errorf("%s: no runbook: %v", a.Alert, err)
		}
		if !bytes.Contains(index, []byte("]("+page+")")) {
			t.Errorf("%s: docs/runbooks/README.md does not link %s", a.Alert, page)
		}
		if s := a.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", a.Alert, s)
		}
		for _, key := range []string{"summary", "description"} {
			if strings.TrimSpace(a.Annotations[key]) == "" {
				t.Errorf("%s: no %s", a.Alert, key)
			}
		}
	}
	entries, err := os.ReadDir(runbookDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if name := e.Name(); name != "README.md" && !pages[name] {
			t.Errorf("docs/runbooks/%s is the runbook of no alert", name)
		}
	}
}

// TestTheChartReferenceListsEveryAlert: docs/reference/helm-chart.md has a
// row for each alert of the chart, and no other, and says how many there are.
func TestTheChartReferenceListsEveryAlert(t *testing.T) {
	doc, err := os.ReadFile("../../docs/reference/helm-chart.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `(Carousel[A-Za-z]+)` \\|").FindAllSubmatch(doc, -1)
	listed := map[string]bool{}
	for _, row := range rows {
		listed[string(row[1])] = true
	}
	all := alerts(t, render(t))
	for _, a := range all {
		if !listed[a.Alert] {
			t.Errorf("docs/reference/helm-chart.md has no row for %s", a.Alert)
		}
		delete(listed, a.Alert)
	}
	for name := range listed {
		t.Errorf("docs/reference/helm-chart.md lists %s, which the chart does not have", name)
	}
	words := []string{"no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"}
	if len(all) >= len(words) || !bytes.Contains(doc, []byte("\n"+words[len(all)]+" alerts, ")) {
		t.Errorf("docs/reference/helm-chart.md does not say the PrometheusRule has %d alerts", len(all))
	}
}

// TestRunbookBaseURL: the base is the value's, with a trailing slash or not.
func TestRunbookBaseURL(t *testing.T) {
	for _, base := range []string{"https://runbooks.example.com/carousel", "https://runbooks.example.com/carousel/"} {
		for _, a := range alerts(t, render(t, "metrics.prometheusRule.runbookBaseURL="+base)) {
			want := "https://runbooks.example.com/carousel/" + strings.ToLower(a.Alert) + ".md"
			if got := a.Annotations["runbook_url"]; got != want {
				t.Errorf("runbookBaseURL %s: %s has runbook_url %q, want %q", base, a.Alert, got, want)
			}
		}
	}
}

// TestReconcileErrorsJob: the alert on controller-runtime's metrics, which
// every operator exports under the same names, reads Carousel's job only.
func TestReconcileErrorsJob(t *testing.T) {
	for set, job := range map[string]string{
		"":                    `job="carousel-metrics"`,
		"fullnameOverride=cr": `job="cr-metrics"`,
		"metrics.prometheusRule.job=carousel-pods": `job="carousel-pods"`,
	} {
		var sets []string
		if set != "" {
			sets = append(sets, set)
		}
		var found bool
		for _, a := range alerts(t, render(t, sets...)) {
			if a.Alert == "CarouselReconcileErrors" {
				found = true
				if !strings.Contains(a.Expr, job) {
					t.Errorf("--set %q: expression %q does not select %s", set, a.Expr, job)
				}
			}
		}
		if !found {
			t.Fatal("no CarouselReconcileErrors")
		}
	}
}
