package framework

import (
	"path/filepath"
	"testing"

	"k8s.io/apiserver/pkg/server/egressselector"
)

// TestEgressSelector checks that kube-apiserver's own loader reads the
// egress selector configuration the API server replicas start with, accepts
// it, and sends the cluster's traffic to the tunnel server's socket.
func TestEgressSelector(t *testing.T) {
	m := &ManagedControlPlane{Dir: t.TempDir()}
	path, err := m.writeEgressSelector(1)
	if err != nil {
		t.Fatal(err)
	}
	config, err := egressselector.ReadEgressSelectorConfiguration(path)
	if err != nil {
		t.Fatal(err)
	}
	if errs := egressselector.ValidateEgressSelectorConfiguration(config); len(errs) > 0 {
		t.Fatalf("kube-apiserver refuses it: %v", errs.ToAggregate())
	}
	if len(config.EgressSelections) != 1 {
		t.Fatalf("got %d egress selections, want the cluster's only", len(config.EgressSelections))
	}
	cluster := config.EgressSelections[0]
	if cluster.Name != "cluster" || cluster.Connection.Transport == nil || cluster.Connection.Transport.UDS == nil ||
		cluster.Connection.Transport.UDS.UDSName != filepath.Join(m.Dir, "konnectivity-1.sock") {
		t.Errorf("got %+v, want the cluster egress through replica 1's tunnel socket", cluster)
	}
}
