package chart

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/carousel-dev/carousel/pkg/operator"
)

var _ = Describe("The chart's values", func() {
	DescribeTable("lint clean", func(set ...string) {
		args := []string{"lint", "--strict", chartDir}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, err := helm(args...)
		Expect(err).NotTo(HaveOccurred(), out)
	},
		Entry("with the defaults"),
		Entry("with cert-manager issuing the webhook certificate", "webhook.certManager.enabled=true"),
		Entry("without the webhook", "webhook.enabled=false"),
		Entry("with the ServiceMonitor and the PrometheusRule", "metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true"),
		Entry("without metrics", "metrics.enabled=false"),
		Entry("without the CRD", "crds.enabled=false"),
		Entry("with one replica and no leader election", "replicaCount=1", "leaderElection.enabled=false"),
		Entry("as three shards", "replicaCount=3", "leaderElection.enabled=false", "sharding.enabled=true"),
		Entry("with the audit webhook", "auditWebhook.enabled=true"),
		Entry("with the audit webhook and cert-manager", "auditWebhook.enabled=true", "webhook.certManager.enabled=true"),
	)

	It("keeps the webhook's certificate in a Secret of its own in each mode, so that a switch of modes is not held by the other's", func() {
		// The longest names the templates take: the Secrets' names are not cut to a Service's 63 characters.
		for _, name := range [][]string{{"fullnameOverride=carousel"}, {"fullnameOverride=" + strings.Repeat("a", 55)},
			{"fullnameOverride=" + strings.Repeat("a", 63), "metrics.enabled=false"}} {
			names := map[string]string{}
			for _, certManager := range []string{"false", "true"} {
				args := []string{"template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "webhook.certManager.enabled=" + certManager}
				for _, set := range name {
					args = append(args, "--set", set)
				}
				out, err := helm(args...)
				Expect(err).NotTo(HaveOccurred(), out)
				match := regexp.MustCompile(`(?:--webhook-cert-secret=carousel-system/|secretName: )([a-z]+-webhook-[a-z]+)\n`).FindStringSubmatch(out)
				Expect(match).NotTo(BeNil(), "certManager.enabled=%s names no certificate Secret", certManager)
				names[certManager] = match[1]
			}
			Expect(names["false"]).NotTo(Equal(names["true"]), "%v", name)
		}
	})

	It("points the managed API servers' audit webhook at the webhook Service, trusting the webhook's CA", func() {
		for _, tc := range []struct{ set, secret, key string }{
			{"webhook.certManager.enabled=false", "carousel-webhook-cert", "ca-bundle.crt"},
			{"webhook.certManager.enabled=true", "carousel-webhook-tls", "ca.crt"},
		} {
			out, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "auditWebhook.enabled=true", "--set", tc.set)
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(out).To(And(ContainSubstring("- --audit-webhook-url=https://carousel-webhook.carousel-system.svc:443/audit\n"),
				ContainSubstring("- --audit-webhook-ca-file=/etc/carousel/audit-webhook/ca.crt\n"),
				ContainSubstring("secretName: "+tc.secret+"\n            optional: true\n            items:\n              - key: "+tc.key+"\n")), tc.set)
		}
		out, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "auditWebhook.enabled=true",
			"--set", "auditWebhook.url=https://carousel.example.com/audit", "--set", "webhook.extraDNSNames={carousel.example.com}")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("- --audit-webhook-url=https://carousel.example.com/audit\n"))
		out, err = helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "auditWebhook.enabled=true",
			"--set", "auditWebhook.url=https://Carousel.Example.com/audit", "--set", "webhook.extraDNSNames={carousel.example.com}")
		Expect(err).NotTo(HaveOccurred(), "a host name is the same in any case: %s", out)
		out, err = helm("template", "carousel", chartDir, "--namespace", "carousel-system")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).NotTo(ContainSubstring("audit-webhook"))

		By("an IP address as the host: among the certificate's IP addresses, self-issued or cert-manager's")
		ip := []string{"--set", "auditWebhook.enabled=true", "--set", "auditWebhook.url=https://10.0.0.5/audit", "--set", "webhook.extraDNSNames={10.0.0.5}"}
		out, err = helm(append([]string{"template", "carousel", chartDir, "--namespace", "carousel-system"}, ip...)...)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("- --webhook-dns-names=carousel-webhook,carousel-webhook.carousel-system,carousel-webhook.carousel-system.svc," +
			"carousel-webhook.carousel-system.svc.cluster.local,carousel-metrics,carousel-metrics.carousel-system,carousel-metrics.carousel-system.svc,carousel-metrics.carousel-system.svc.cluster.local,10.0.0.5\n"))
		out, err = helm(append([]string{"template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "webhook.certManager.enabled=true"}, ip...)...)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("    - carousel-metrics.carousel-system.svc.cluster.local\n  ipAddresses:\n    - 10.0.0.5\n  usages:\n"))
		out, err = helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "auditWebhook.enabled=true",
			"--set", "auditWebhook.url=https://10.0.0.6/audit", "--set", "webhook.extraDNSNames={10.0.0.5}")
		Expect(err).To(MatchError(ContainSubstring(`auditWebhook.url names the host "10.0.0.6"`)), "a host the certificate does not name: %s", out)
		out, err = helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "webhook.extraDNSNames={fd00::5::1}")
		Expect(err).To(HaveOccurred(), "neither a DNS name nor an IP address: %s", out)
		out, err = helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "webhook.extraDNSNames={1e3}")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring(".svc.cluster.local,1e3\n"), "a name that reads as a number in YAML stays as written")
	})

	It("renders, for the default values, the manager's arguments the chart reference lists", func() {
		out, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system")
		Expect(err).NotTo(HaveOccurred(), out)
		var rendered []string
		for _, doc := range strings.Split(out, "---\n") {
			if strings.Contains(doc, "\nkind: Deployment\n") {
				for _, m := range regexp.MustCompile(`(?m)^ {12}- (--\S+)$`).FindAllStringSubmatch(doc, -1) {
					rendered = append(rendered, m[1])
				}
			}
		}
		reference, err := os.ReadFile(filepath.Join(root, "docs", "reference", "helm-chart.md"))
		Expect(err).NotTo(HaveOccurred())
		listed := regexp.MustCompile("(?s)For the default values in namespace\n`carousel-system`:\n\n```\n(.*?)\n```").FindSubmatch(reference)
		Expect(listed).To(HaveLen(2), "docs/reference/helm-chart.md lists the default arguments")
		Expect(rendered).To(Equal(strings.Split(string(listed[1]), "\n")))
	})

	It("runs the helm test Pod where the manager may run: its node selector, tolerations, node affinity, priority, resources, labels and annotations", func() {
		values := filepath.Join(GinkgoT().TempDir(), "values.yaml")
		Expect(os.WriteFile(values, []byte(`podLabels: {team: platform, app.kubernetes.io/component: mine}
podAnnotations: {sidecar.istio.io/inject: "false", helm.sh/hook: mine}
nodeSelector: {role: infra}
tolerations: [{key: infra, operator: Exists, effect: NoSchedule}]
priorityClassName: platform
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a]}]}]
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app.kubernetes.io/component: controller-manager}}}
`), 0o600)).To(Succeed())
		out, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--values", values)
		Expect(err).NotTo(HaveOccurred(), out)
		var pod corev1.Pod
		for _, doc := range strings.Split(out, "---\n") {
			if strings.Contains(doc, "\nkind: Pod\n") {
				Expect(yaml.Unmarshal([]byte(doc), &pod)).To(Succeed())
			}
		}
		Expect(pod.Name).To(Equal("carousel-test-webhook"))
		Expect(pod.Spec.NodeSelector).To(Equal(map[string]string{"role": "infra"}))
		Expect(pod.Spec.Tolerations).To(Equal([]corev1.Toleration{{Key: "infra", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}))
		Expect(pod.Spec.PriorityClassName).To(Equal("platform"))
		Expect(pod.Spec.Affinity).NotTo(BeNil())
		Expect(pod.Spec.Affinity.NodeAffinity).NotTo(BeNil())
		Expect(pod.Spec.Affinity.PodAntiAffinity).To(BeNil(), "the manager Pods' anti-affinity is theirs")
		Expect(pod.Spec.Containers).To(HaveLen(1))
		Expect(pod.Spec.Containers[0].Resources.Limits.Memory().String()).To(Equal("512Mi"))
		Expect(pod.Labels).To(And(HaveKeyWithValue("team", "platform"), HaveKeyWithValue("app.kubernetes.io/component", "test")), "the chart's labels win")
		Expect(pod.Annotations).To(And(HaveKeyWithValue("sidecar.istio.io/inject", "false"), HaveKeyWithValue("helm.sh/hook", "test")), "the chart's annotations win")
	})

	It("adds webhook.extraDNSNames to the webhook's serving certificate, self-issued or cert-manager's", func() {
		out, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "webhook.extraDNSNames={carousel.example.com}")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("- --webhook-dns-names=carousel-webhook,carousel-webhook.carousel-system,carousel-webhook.carousel-system.svc," +
			"carousel-webhook.carousel-system.svc.cluster.local,carousel-metrics,carousel-metrics.carousel-system,carousel-metrics.carousel-system.svc,carousel-metrics.carousel-system.svc.cluster.local,carousel.example.com\n"))
		out, err = helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "webhook.extraDNSNames={carousel.example.com}",
			"--set", "webhook.certManager.enabled=true")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("- carousel-metrics.carousel-system.svc.cluster.local\n    - carousel.example.com\n"))
	})

	It("lets the manager delete Secrets (its probe certificates') but no ConfigMap", func() {
		out, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("    resources:\n    - configmaps\n    verbs:\n    - create\n    - get\n    - list\n    - update\n    - watch\n"))
		Expect(out).To(ContainSubstring("    resources:\n    - secrets\n    verbs:\n    - create\n    - delete\n"))
	})

	It("has cert-manager renew its own webhook CA with the same key, so that the serving certificate it signed still verifies", func() {
		out, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "webhook.certManager.enabled=true")
		Expect(err).NotTo(HaveOccurred(), out)
		ca := regexp.MustCompile(`(?s)kind: Certificate\nmetadata:\n  name: carousel-webhook-ca\n.*?\n---`).FindString(out)
		Expect(ca).To(And(ContainSubstring("isCA: true"), ContainSubstring("rotationPolicy: Never")))
	})

	It("runs sharded replicas as shards of its ControllerRing, each named after its Pod, and refuses sharding with leader election", func() {
		out, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "replicaCount=3",
			"--set", "leaderElection.enabled=false", "--set", "sharding.enabled=true", "--set", "sharding.controllerRing=fleet")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(And(ContainSubstring("- --shard-controller-ring=fleet\n"), ContainSubstring("- --shard-name=$(POD_NAME)\n"),
			ContainSubstring("- --shard-lease-namespace=carousel-system\n"), ContainSubstring("fieldPath: metadata.name"),
			ContainSubstring("kind: ControllerRing\nmetadata:\n  name: fleet\n"), Not(ContainSubstring("--leader-elect"))))
		_, err = helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "sharding.enabled=true")
		Expect(err).To(MatchError(ContainSubstring("sharding.enabled=true replaces leader election")))
		// A Lease holds its duration in whole seconds.
		_, err = helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "leaderElection.enabled=false",
			"--set", "sharding.enabled=true", "--set", "sharding.leaseDuration=500ms")
		Expect(err).To(MatchError(ContainSubstring("leaseDuration")))
		// Nor is it 0s, which the manager refuses at start.
		_, err = helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "leaderElection.enabled=false",
			"--set", "sharding.enabled=true", "--set", "sharding.leaseDuration=0m0s")
		Expect(err).To(MatchError(ContainSubstring("leaseDuration")))
	})

	It("names its Services apart within 63 characters, and the alerts' job after the metrics Service, or refuses a name too long for that", func() {
		out, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "fullnameOverride="+strings.Repeat("a", 55),
			"--set", "metrics.prometheusRule.enabled=true")
		Expect(err).NotTo(HaveOccurred(), out)
		services := regexp.MustCompile(`(?m)^kind: Service\nmetadata:\n  name: (\S+)$`).FindAllStringSubmatch(out, -1)
		Expect(services).To(HaveLen(2), "the webhook and metrics Services")
		Expect(services[0][1]).NotTo(Equal(services[1][1]))
		for _, svc := range services {
			Expect(len(svc[1])).To(BeNumerically("<=", 63), "Service %s", svc[1])
		}
		Expect(out).To(ContainSubstring(`up{job="` + strings.Repeat("a", 55) + `-metrics"}`))
		_, err = helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "fullnameOverride="+strings.Repeat("a", 56))
		Expect(err).To(MatchError(ContainSubstring("is 56 characters: the Services add -webhook and -metrics")))
		_, err = helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "fullnameOverride="+strings.Repeat("a", 56),
			"--set", "metrics.enabled=false")
		Expect(err).NotTo(HaveOccurred(), "one Service, whose name may be cut to 63 characters")
	})

	It("renders without a cluster, for the Kubernetes version the tests run", func() {
		out, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system")
		Expect(err).NotTo(HaveOccurred())
		for _, kind := range []string{"CustomResourceDefinition", "Deployment", "ValidatingWebhookConfiguration", "PodDisruptionBudget", "ClusterRole", "Role"} {
			Expect(out).To(ContainSubstring("\nkind: "+kind+"\n"), "no %s", kind)
		}
	})

	It("grants the reviews of scrapers' tokens only to HTTPS metrics, which make them", func() {
		reviews := func(args ...string) []string {
			GinkgoHelper()
			out, err := helm(append([]string{"template", "carousel", chartDir, "--namespace", "carousel-system"}, args...)...)
			Expect(err).NotTo(HaveOccurred())
			var roles []string
			decoder := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
			for {
				var role rbacv1.ClusterRole
				if err := decoder.Decode(&role); err != nil {
					Expect(err).To(MatchError(io.EOF))
					return roles
				}
				for _, rule := range role.Rules {
					if role.Kind == "ClusterRole" && (slices.Contains(rule.Resources, "tokenreviews") || slices.Contains(rule.Resources, "subjectaccessreviews")) {
						roles = append(roles, role.Name+": "+strings.Join(rule.Resources, ","))
					}
				}
			}
		}
		Expect(reviews()).To(ConsistOf("carousel-metrics-auth: tokenreviews", "carousel-metrics-auth: subjectaccessreviews"))
		Expect(reviews("--set", "metrics.secure=false")).To(BeEmpty())
		Expect(reviews("--set", "metrics.enabled=false")).To(BeEmpty())
	})

	It("grants leader election its one Lease, not the other Leases of a shared namespace, and the shards theirs", func() {
		leaseRules := func(args ...string) []rbacv1.PolicyRule {
			GinkgoHelper()
			out, err := helm(append([]string{"template", "carousel", chartDir, "--namespace", "carousel-system"}, args...)...)
			Expect(err).NotTo(HaveOccurred())
			decoder := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
			for {
				var role rbacv1.Role
				if err := decoder.Decode(&role); err != nil {
					Expect(err).To(MatchError(io.EOF))
					return nil
				}
				if role.Kind == "Role" && role.Name == "carousel-leader-election" {
					return slices.DeleteFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return !slices.Contains(r.Resources, "leases") })
				}
			}
		}
		Expect(leaseRules()).To(ConsistOf(
			rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
			rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "update"},
				ResourceNames: []string{operator.LeaderElectionID}}))
		Expect(leaseRules("--set", "leaderElection.enabled=false", "--set", "sharding.enabled=true")).To(ConsistOf(
			rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}}))
		Expect(leaseRules("--set", "leaderElection.enabled=false", "--set", "replicaCount=1")).To(BeEmpty())
	})

	It("lets a drain evict replicas that are not ready, and prefers the replicas on different nodes", func() {
		out, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--show-only", "templates/pdb.yaml")
		Expect(err).NotTo(HaveOccurred())
		var budget policyv1.PodDisruptionBudget
		Expect(yaml.Unmarshal([]byte(out), &budget)).To(Succeed())
		Expect(budget.Spec.UnhealthyPodEvictionPolicy).To(HaveValue(Equal(policyv1.AlwaysAllow)),
			"replicas crash-looping together would hold a drain for ever")

		out, err = helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--show-only", "templates/deployment.yaml")
		Expect(err).NotTo(HaveOccurred())
		var deployment appsv1.Deployment
		Expect(yaml.Unmarshal([]byte(out), &deployment)).To(Succeed())
		Expect(deployment.Spec.Template.Spec.TopologySpreadConstraints).To(ConsistOf(And(
			HaveField("TopologyKey", corev1.LabelHostname), HaveField("MaxSkew", BeEquivalentTo(1)),
			HaveField("WhenUnsatisfiable", corev1.ScheduleAnyway),
			HaveField("LabelSelector.MatchLabels", Equal(deployment.Spec.Selector.MatchLabels)))))
	})

	It("keeps a replica told to stop serving the webhook while its Service lets it go, where the sleep action exists", func() {
		deployment := func(args ...string) appsv1.Deployment {
			GinkgoHelper()
			out, err := helm(append([]string{"template", "carousel", chartDir, "--namespace", "carousel-system", "--show-only", "templates/deployment.yaml"}, args...)...)
			Expect(err).NotTo(HaveOccurred())
			var d appsv1.Deployment
			Expect(yaml.Unmarshal([]byte(out), &d)).To(Succeed())
			return d
		}
		pod := deployment().Spec.Template.Spec
		Expect(pod.Containers[0].Lifecycle).NotTo(BeNil())
		Expect(pod.Containers[0].Lifecycle.PreStop.Sleep).To(HaveValue(HaveField("Seconds", BeEquivalentTo(5))))
		Expect(pod.TerminationGracePeriodSeconds).To(HaveValue(BeEquivalentTo(35)), "the manager keeps its 30 s after the signal")
		Expect(deployment("--kube-version", "1.29.0").Spec.Template.Spec.Containers[0].Lifecycle).To(BeNil(), "Kubernetes 1.29 has no sleep action by default")
		Expect(deployment("--set", "shutdownDelaySeconds=0").Spec.Template.Spec.Containers[0].Lifecycle).To(BeNil())
		_, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "shutdownDelaySeconds=-1")
		Expect(err).To(MatchError(ContainSubstring("shutdownDelaySeconds")))
	})

	It("has Prometheus keep the Cluster's namespace on Carousel's series, so that the alerts name the Cluster", func() {
		out, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "metrics.serviceMonitor.enabled=true",
			"--show-only", "templates/servicemonitor.yaml")
		Expect(err).NotTo(HaveOccurred())
		var monitor struct {
			Spec struct {
				Endpoints []struct {
					Port            string `json:"port"`
					HonorLabels     bool   `json:"honorLabels"`
					Scheme          string `json:"scheme"`
					BearerTokenFile string `json:"bearerTokenFile"`
				} `json:"endpoints"`
			} `json:"spec"`
		}
		Expect(yaml.Unmarshal([]byte(out), &monitor)).To(Succeed())
		Expect(monitor.Spec.Endpoints).To(ConsistOf(And(HaveField("Port", "metrics"), HaveField("HonorLabels", true),
			HaveField("Scheme", "https"), HaveField("BearerTokenFile", "/var/run/secrets/kubernetes.io/serviceaccount/token"))))
	})

	It("has Prometheus verify the metrics endpoint's certificate, the webhook's, whenever there is a webhook", func() {
		type tlsConfig struct {
			ServerName         string `json:"serverName"`
			InsecureSkipVerify bool   `json:"insecureSkipVerify"`
			CA                 struct {
				Secret struct{ Name, Key string } `json:"secret"`
			} `json:"ca"`
		}
		monitor := func(set ...string) tlsConfig {
			GinkgoHelper()
			args := []string{"template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "metrics.serviceMonitor.enabled=true",
				"--show-only", "templates/servicemonitor.yaml"}
			for _, s := range set {
				args = append(args, "--set", s)
			}
			out, err := helm(args...)
			Expect(err).NotTo(HaveOccurred(), out)
			var m struct {
				Spec struct {
					Endpoints []struct {
						TLSConfig tlsConfig `json:"tlsConfig"`
					} `json:"endpoints"`
				} `json:"spec"`
			}
			Expect(yaml.Unmarshal([]byte(out), &m)).To(Succeed())
			Expect(m.Spec.Endpoints).To(HaveLen(1))
			return m.Spec.Endpoints[0].TLSConfig
		}
		selfIssued := monitor()
		Expect(selfIssued.InsecureSkipVerify).To(BeFalse())
		Expect(selfIssued.ServerName).To(Equal("carousel-metrics.carousel-system.svc"))
		Expect(selfIssued.CA.Secret).To(Equal(struct{ Name, Key string }{"carousel-webhook-cert", "ca-bundle.crt"}))
		certManager := monitor("webhook.certManager.enabled=true")
		Expect(certManager.InsecureSkipVerify).To(BeFalse())
		Expect(certManager.ServerName).To(Equal("carousel-metrics.carousel-system.svc"))
		Expect(certManager.CA.Secret).To(Equal(struct{ Name, Key string }{"carousel-webhook-tls", "ca.crt"}))
		Expect(monitor("webhook.enabled=false").InsecureSkipVerify).To(BeTrue(), "without the webhook the certificate is self-signed")

		// The certificate names the metrics Service, and cert-manager's is mounted for the metrics endpoint too.
		out, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`--webhook-dns-names=[^\n]*,carousel-metrics\.carousel-system\.svc,`))
		Expect(out).NotTo(ContainSubstring("--metrics-cert-dir"), "a self-issuing manager serves its own")
		out, err = helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "webhook.certManager.enabled=true")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(And(ContainSubstring("- --metrics-cert-dir=/etc/carousel/webhook-certs\n"), ContainSubstring("    - carousel-metrics.carousel-system.svc\n")))
		out, err = helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", "metrics.secure=false")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).NotTo(ContainSubstring("carousel-metrics.carousel-system.svc"), "plain HTTP needs no name in the certificate")
	})

	DescribeTable("refused by the schema", func(set, field string) {
		_, err := helm("template", "carousel", chartDir, "--namespace", "carousel-system", "--set", set)
		Expect(err).To(HaveOccurred(), "helm accepted --set %s", set)
		Expect(err.Error()).To(And(ContainSubstring("values don't meet the specifications of the schema"), ContainSubstring(field)))
	},
		Entry("a negative replica count", "replicaCount=-1", "replicaCount"),
		Entry("an unknown pull policy", "image.pullPolicy=Sometimes", "pullPolicy"),
		Entry("a duration that is not one", "controller.caExpiryWarning=soon", "caExpiryWarning"),
		Entry("a kubelet certificate validity of 0, which the manager refuses at start", "controller.csrMaxDuration=0s", "csrMaxDuration"),
		Entry("no CA expiry warning, which the manager refuses at start", "controller.caExpiryWarning=0s", "caExpiryWarning"),
		Entry("a managed poll interval of 0, which the manager refuses at start", "controller.managedPollInterval=0m", "managedPollInterval"),
		Entry("no timeout of requests to managed API servers, which the manager refuses at start", "controller.evidenceTimeout=0s", "evidenceTimeout"),
		Entry("an APIService resync of 0, which the manager refuses at start", "controller.apiServiceResync=0s", "apiServiceResync"),
		Entry("a rotation interval that is no duration", "controller.caRotationInterval=90d", "caRotationInterval"),
		Entry("an unknown failure policy", "webhook.failurePolicy=Maybe", "failurePolicy"),
		Entry("a port out of range", "webhook.port=70000", "port"),
		Entry("a misspelt key", "replicasCount=2", "replicasCount"),
		Entry("a log level that is not one", "controller.logLevel=loud", "logLevel"),
		Entry("no replica", "replicaCount=0", "replicaCount"),
		Entry("a name that is no DNS label", "fullnameOverride=1abc", "fullnameOverride"),
		Entry("an audit webhook URL over plain HTTP", "auditWebhook.url=http://carousel/audit", "/auditWebhook/url"),
		Entry("an audit webhook URL without the receiver's path", "auditWebhook.url=https://carousel.example.com", "/auditWebhook/url"),
		Entry("a webhook DNS name that is not one", "webhook.extraDNSNames={carousel.example.com/audit}", "/webhook/extraDNSNames/0"),
	)

	DescribeTable("refused by the templates", func(release string, set []string, message string) {
		args := []string{"template", release, chartDir, "--namespace", "carousel-system"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		_, err := helm(args...)
		Expect(err).To(MatchError(ContainSubstring(message)))
	},
		Entry("an existing ServiceAccount without its name", "carousel", []string{"serviceAccount.create=false"}, "serviceAccount.name must name an existing ServiceAccount"),
		Entry("replicas without leader election", "carousel", []string{"leaderElection.enabled=false"}, "needs leaderElection.enabled=true"),
		Entry("two endpoints on one port", "carousel", []string{"metrics.port=8081"}, "metrics.port 8081 is already used by health.port"),
		Entry("a release name the webhook Service cannot carry", "team.carousel", nil, "is not a DNS-1035 label"),
		Entry("the audit webhook without the webhook server", "carousel", []string{"auditWebhook.enabled=true", "webhook.enabled=false"},
			"auditWebhook.enabled=true needs webhook.enabled=true"),
		Entry("an audit webhook URL whose host the webhook's certificate does not name", "carousel",
			[]string{"auditWebhook.enabled=true", "auditWebhook.url=https://carousel.example.com:8443/audit"},
			`auditWebhook.url names the host "carousel.example.com", which is not a name of the webhook's serving certificate`),
		Entry("an audit webhook URL to an IP address", "carousel",
			[]string{"auditWebhook.enabled=true", "auditWebhook.url=https://192.0.2.10/audit", "webhook.extraDNSNames={carousel.example.com}"},
			`names the host "192.0.2.10"`),
	)
})
