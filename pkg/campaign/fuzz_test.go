package campaign

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// FuzzPlan checks Plan's promises on any mix of Clusters and budgets: the
// counts add up, only pending Clusters are started, never past the
// concurrency budget, and none while halted, paused or done.
func FuzzPlan(f *testing.F) {
	f.Add("PPIDFXWS", uint8(3), "", uint8(1), "", false, false)
	f.Add("PPPPPPPPPP", uint8(0), "30%", uint8(0), "10%", true, true)
	f.Fuzz(func(t *testing.T, clusters string, maxConcurrent uint8, maxConcurrentPercent string, maxFailures uint8, maxFailuresPercent string, paused, complete bool) {
		ss := standings(filter(clusters, "PWIDSFX"))
		spec := v1alpha1.RotationCampaignSpec{Paused: paused, MaxConcurrent: countOrPercent(maxConcurrent, maxConcurrentPercent),
			MaxFailures: countOrPercent(maxFailures, maxFailuresPercent)}
		if complete {
			spec.Step = v1alpha1.CampaignComplete
		}
		// Plan's inputs are specs the webhook accepted.
		if v1alpha1.ValidateRotationCampaign(&v1alpha1.RotationCampaign{Spec: withSelector(spec)}) != nil {
			return
		}
		d := Plan(&spec, ss)
		c := d.Counts
		if c.Pending+c.Waiting+c.InProgress+c.Done+c.Skipped+c.Failed != c.Selected || int(c.Selected) != len(ss) {
			t.Fatalf("counts %+v do not add up to %d", c, len(ss))
		}
		pending, occupied := map[string]bool{}, 0
		for _, s := range ss {
			pending[s.Name] = s.State == v1alpha1.CampaignClusterPending
			if s.Rotating {
				occupied++
			}
		}
		for _, name := range d.Start {
			if !pending[name] {
				t.Fatalf("started %s, which is not pending", name)
			}
			pending[name] = false
		}
		if budget := spec.MaxConcurrentOf(len(ss)); len(d.Start) > 0 && occupied+len(d.Start) > budget {
			t.Fatalf("started %d with %d rotating, past the budget of %d", len(d.Start), occupied, budget)
		}
		if len(d.Start) > 0 && d.Phase != v1alpha1.CampaignStarting && d.Phase != v1alpha1.CampaignCompleting {
			t.Fatalf("started %v in phase %s", d.Start, d.Phase)
		}
		if int(c.Failed) > spec.MaxFailuresOf(len(ss)) && d.Phase != v1alpha1.CampaignHalted && d.Progressing.Reason != v1alpha1.ReasonCampaignStepDone {
			t.Fatalf("%d failed past the budget, phase %s", c.Failed, d.Phase)
		}
	})
}

func filter(s, allowed string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		for j := 0; j < len(allowed); j++ {
			if s[i] == allowed[j] {
				out = append(out, s[i])
			}
		}
	}
	return string(out)
}

func countOrPercent(n uint8, percent string) *intstr.IntOrString {
	if percent != "" {
		v := intstr.FromString(percent)
		return &v
	}
	if n == 0 {
		return nil
	}
	v := intstr.FromInt32(int32(n))
	return &v
}

func withSelector(spec v1alpha1.RotationCampaignSpec) v1alpha1.RotationCampaignSpec {
	spec.Selector.MatchLabels = map[string]string{"fleet": "a"}
	return spec
}
