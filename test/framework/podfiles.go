package framework

import (
	"fmt"
	"os"
	"path/filepath"
)

// podFiles are the credential files of one pod of the platform, as a pod gets
// its Secrets and ConfigMaps when it mounts them with subPath: copies of the
// files in the control plane's Dir as they are when the pod's container
// starts, which never change under it. A running process therefore reloads
// none of its credentials; it takes new ones when the platform restarts it,
// as Carousel's checksum annotation has the workload rolled.
//
// A Secret volume mounted without subPath is updated in place under a
// running pod. A kube-apiserver replica not yet rolled then reloads its
// kubelet client certificate at its next handshake with a kubelet, and
// client-go closes every connection to the kubelets (transport/cert_rotation.go),
// cutting the exec, logs and proxy calls in flight; docs/explanation/ca-rotation.md
// tells platforms so.
type podFiles struct {
	store, dir string
	err        error
}

// podFiles returns the credential files of the pod named pod.
func (m *ManagedControlPlane) podFiles(pod string) *podFiles {
	return &podFiles{store: m.Dir, dir: filepath.Join(m.Dir, "pods", pod)}
}

// file copies the credential file name from the store into the pod and
// returns the copy's path. The first failure is kept in err.
func (p *podFiles) file(name string) string {
	path := filepath.Join(p.dir, name)
	if p.err != nil {
		return path
	}
	data, err := os.ReadFile(filepath.Join(p.store, name))
	if err == nil {
		err = os.MkdirAll(p.dir, 0o700)
	}
	if err == nil {
		err = writeFileAtomic(path, data)
	}
	if err != nil {
		p.err = fmt.Errorf("mounting %s into %s: %w", name, p.dir, err)
	}
	return path
}
