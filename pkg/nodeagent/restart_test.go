package nodeagent

import (
	"reflect"
	"testing"
)

// TestRestartReasons is the restart decision: the kubelet is restarted when
// and only when something changed that it loads only at start.
func TestRestartReasons(t *testing.T) {
	const (
		kubeconfigCA = "the kubelet loads its kubeconfig's trust bundle only at start"
		clientPair   = "the kubelet reads its client certificate only at start"
		serving      = "the kubelet reads its serving certificate only at start"
	)
	for _, tt := range []struct {
		name    string
		changes Changes
		want    []string
	}{
		{"nothing changed", Changes{}, nil},
		{"clientCAFile: reloaded by the kubelet", Changes{ClientCAFile: true}, nil},
		{"bootstrap kubeconfig: read only to bootstrap", Changes{BootstrapKubeconfigCA: true}, nil},
		{"both of those", Changes{ClientCAFile: true, BootstrapKubeconfigCA: true}, nil},
		{"kubeconfig CA", Changes{KubeconfigCA: true}, []string{kubeconfigCA}},
		{"client pair", Changes{ClientPair: true}, []string{clientPair}},
		{"serving pair removed", Changes{ServingPair: true}, []string{serving}},
		{"preparing: bundles and client pair", Changes{KubeconfigCA: true, BootstrapKubeconfigCA: true, ClientCAFile: true, ClientPair: true},
			[]string{kubeconfigCA, clientPair}},
		{"finalizing: everything", Changes{KubeconfigCA: true, BootstrapKubeconfigCA: true, ClientCAFile: true, ClientPair: true, ServingPair: true},
			[]string{kubeconfigCA, clientPair, serving}},
		{"clientCAFile and the serving pair", Changes{ClientCAFile: true, ServingPair: true}, []string{serving}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := RestartReasons(tt.changes); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("RestartReasons(%+v) = %q, want %q", tt.changes, got, tt.want)
			}
		})
	}
}
