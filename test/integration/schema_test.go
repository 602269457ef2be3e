package integration

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// A value the typed clients cannot decode would stop the manager's cache of
// every Cluster (or campaign): a watch that meets it ends, and each list
// after it fails. The webhook refuses such a value only because it cannot
// decode it either, and it may be off or fail open; the CRD schema refuses
// it before either runs.
var _ = Describe("The CRD schema, for what the typed clients cannot decode", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	// object is a Cluster or RotationCampaign with spec, besides what the
	// schema requires.
	object := func(kind string, spec map[string]any) *unstructured.Unstructured {
		if kind == "Cluster" {
			spec["kubernetesVersion"] = "1.36.3"
		} else {
			spec["selector"] = map[string]any{"matchLabels": map[string]any{"fleet": "blue"}}
		}
		u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(kind))
		u.SetNamespace(ns)
		u.SetName("schema")
		return u
	}

	DescribeTable("refuses", func(ctx SpecContext, kind string, spec map[string]any, field string) {
		err := k8s.Create(ctx, object(kind, spec), client.DryRunAll)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(field))
		Expect(err.Error()).NotTo(ContainSubstring("admission webhook"), "refused by the schema, before any webhook")
	},
		Entry("a duration that does not parse", "Cluster", map[string]any{"certificates": map[string]any{"caValidity": "1y"}}, "spec.certificates.caValidity"),
		Entry("a duration past what a Go duration holds", "Cluster", map[string]any{"kubeletBootstrap": map[string]any{"tokenTTL": "9999999h"}},
			"spec.kubeletBootstrap.tokenTTL"),
		Entry("a pool's timeout that does not parse", "Cluster", map[string]any{"workers": []any{map[string]any{"name": "a", "offlineNodeTimeout": "soon"}}},
			"spec.workers[0].offlineNodeTimeout"),
		Entry("a maxUnavailable past 32 bits", "Cluster", map[string]any{"workers": []any{map[string]any{"name": "a", "maxUnavailable": int64(4294967296)}}},
			"spec.workers[0].maxUnavailable"),
		Entry("a campaign's deadline that does not parse", "RotationCampaign", map[string]any{"progressDeadline": "2 hours"}, "spec.progressDeadline"),
		Entry("a campaign's maxConcurrent past 32 bits", "RotationCampaign", map[string]any{"maxConcurrent": int64(-4294967296)}, "spec.maxConcurrent"),
	)

	It("takes durations and numbers the typed clients decode", func(ctx SpecContext) {
		obj := object("Cluster", map[string]any{
			"certificates": map[string]any{"caValidity": "87600h", "leafValidity": "8760h0m0s"},
			"workers":      []any{map[string]any{"name": "a", "offlineNodeTimeout": "1.5h", "maxUnavailable": int64(3)}},
		})
		Expect(k8s.Create(ctx, obj, client.DryRunAll)).To(Succeed())
		obj = object("RotationCampaign", map[string]any{"progressDeadline": "90m", "maxConcurrent": "10%"})
		Expect(k8s.Create(ctx, obj, client.DryRunAll)).To(Succeed())
	})
})
