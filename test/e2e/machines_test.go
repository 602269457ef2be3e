package e2e

import (
	"context"
	"crypto/x509"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/test/framework"
)

// The journey's Replace pool: a Cluster API MachineDeployment of the test
// provider's Machines (framework.MachineProvider), each a real kubelet that
// bootstrapped with a token of its own; the MachineDeployment is named as
// the pool.
const (
	replacePool     = "replaced"
	replaceReplicas = 2
)

// machineDeployment reads the Replace pool's MachineDeployment.
func machineDeployment(ctx context.Context) *unstructured.Unstructured {
	GinkgoHelper()
	md := &unstructured.Unstructured{}
	md.SetGroupVersionKind(framework.ClusterAPIGVK("MachineDeployment"))
	Expect(tgt.Client.Get(ctx, client.ObjectKey{Namespace: tgt.Namespace, Name: replacePool}, md)).To(Succeed())
	return md
}

// machine is a Machine of the Replace pool as the journey sees it.
type machine struct {
	Name    string
	Created time.Time
	// NodeReadySince is when its Node turned Ready; zero while it is not.
	NodeReadySince time.Time
}

// poolMachines returns the Replace pool's Machines that are not being
// deleted, and how many are.
func poolMachines(ctx context.Context, g Gomega) (live []machine, deleting int) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(framework.ClusterAPIGVK("MachineList"))
	g.Expect(tgt.Client.List(ctx, list, client.InNamespace(tgt.Namespace),
		client.MatchingLabels{framework.LabelDeploymentName: replacePool})).To(Succeed())
	admin := clientFor(adminKubeconfig(ctx))
	for _, m := range list.Items {
		if m.GetDeletionTimestamp() != nil {
			deleting++
			continue
		}
		got := machine{Name: m.GetName(), Created: m.GetCreationTimestamp().Time}
		if node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name"); node != "" {
			n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err == nil {
				for _, c := range n.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
						got.NodeReadySince = c.LastTransitionTime.Time
					}
				}
			}
		}
		live = append(live, got)
	}
	return live, deleting
}

// waitForMachines waits until the Replace pool has exactly its replicas,
// each with a Ready Node, and no Machine being deleted, and returns them.
func waitForMachines(ctx context.Context, timeout time.Duration) []machine {
	GinkgoHelper()
	var machines []machine
	Eventually(func(g Gomega) {
		live, deleting := poolMachines(ctx, g)
		g.Expect(deleting).To(BeZero(), "no Machine is being deleted")
		g.Expect(live).To(HaveLen(replaceReplicas))
		for _, m := range live {
			g.Expect(m.NodeReadySince.IsZero()).To(BeFalse(), "Machine %s has a Ready Node", m.Name)
		}
		machines = live
	}).WithTimeout(timeout).WithPolling(time.Second).Should(Succeed(), "logs: %s", env.WorkDir)
	return machines
}

func machineNames(ms []machine) []string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name
	}
	slices.Sort(names)
	return names
}

// expectMachinesReplaced checks that Carousel rolled the MachineDeployment
// for the phase, recording the rollout time, and that every Machine of before was replaced by one created
// at or after the rollout time, whose kubelet holds a client certificate from
// clientCA and trusts exactly the published bundles. It returns the Machines
// now and how long the replacement took: from the rollout time to the last
// new Node turning Ready.
func expectMachinesReplaced(ctx context.Context, before []machine, phase v1alpha1.CARotationPhase, clientCA *x509.Certificate,
	clusterBundle, kubeletBundle pki.Bundle) ([]machine, time.Duration) {
	GinkgoHelper()
	md := machineDeployment(ctx)
	Expect(md.GetAnnotations()[v1alpha1.AnnotationRolledFor]).To(HaveSuffix("/"+string(phase)), "Carousel rolled the MachineDeployment for %s", phase)
	value, _, _ := unstructured.NestedString(md.Object, "spec", "rollout", "after")
	after, err := time.Parse(time.RFC3339, value)
	Expect(err).NotTo(HaveOccurred(), "spec.rollout.after")
	Expect(md.GetAnnotations()).To(HaveKeyWithValue(v1alpha1.AnnotationRolloutAfter, value), "Carousel recorded the rollout time it set")
	if phase == v1alpha1.RotationPreparing {
		// Finalizing rolls it about when the journey kills the manager, which
		// may end before its event is sent: events are best effort.
		Eventually(func(g Gomega) {
			var events eventsv1.EventList
			g.Expect(tgt.Client.List(ctx, &events, client.InNamespace(tgt.Namespace))).To(Succeed())
			var notes []string
			for _, e := range events.Items {
				if e.Regarding.Name == tgt.Name && e.Reason == v1alpha1.EventMachineDeploymentRolled {
					notes = append(notes, e.Note)
				}
			}
			g.Expect(notes).To(ContainElement(And(ContainSubstring("MachineDeployment "+replacePool+" to "+value), HaveSuffix("phase "+string(phase)+
				": Cluster API replaces every Machine created before it"))))
		}).Should(Succeed(), "an event says Carousel rolled the MachineDeployment for %s", phase)
	}
	now := waitForMachines(ctx, time.Minute)
	var last time.Time
	for _, m := range now {
		Expect(machineNames(before)).NotTo(ContainElement(m.Name), "Machine %s was replaced", m.Name)
		Expect(m.Created.Before(after)).To(BeFalse(), "Machine %s was created at or after the rollout time %s", m.Name, after)
		if m.NodeReadySince.After(last) {
			last = m.NodeReadySince
		}
		n := env.ClusterAPI.Provider.Machines()[m.Name]
		Expect(n).NotTo(BeNil(), "Machine %s runs a kubelet of the test provider", m.Name)
		cert := kubeletFileCertificate(n, framework.KubeletClientCertificate)
		Expect(pki.Verify(cert, pki.NewBundle(clientCA), x509.ExtKeyUsageClientAuth, time.Now())).To(Succeed(),
			"Machine %s's kubelet bootstrapped to a client certificate from client CA %s", m.Name, clientCA.Subject.CommonName)
		expectKubeletTrust(n, clusterBundle, kubeletBundle)
	}
	for _, old := range before {
		Expect(env.ClusterAPI.Provider.Machines()).NotTo(HaveKey(old.Name), "the kubelet of replaced Machine %s stopped", old.Name)
	}
	return now, last.Sub(after)
}
