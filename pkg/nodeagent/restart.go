package nodeagent

// Changes are what an in-place renewal changed on disk that the kubelet
// uses. Each is recorded (see progress) before it is made, so that a renewal
// resumed after a crash still knows the kubelet has not loaded it; the
// client pair just after it is stored (a crash in between renews it once
// more, and that renewal records it).
type Changes struct {
	// KubeconfigCA: the cluster bundle in the kubelet's --kubeconfig.
	KubeconfigCA bool `json:"kubeconfigCA,omitempty"`
	// BootstrapKubeconfigCA: the cluster bundle in the --bootstrap-kubeconfig.
	BootstrapKubeconfigCA bool `json:"bootstrapKubeconfigCA,omitempty"`
	// ClientCAFile: the kubelet bundle in authentication.x509.clientCAFile.
	ClientCAFile bool `json:"clientCAFile,omitempty"`
	// ClientPair: a new kubelet-client-current.pem.
	ClientPair bool `json:"clientPair,omitempty"`
	// ServingPair: a new kubelet-server-current.pem.
	ServingPair bool `json:"servingPair,omitempty"`
}

// RestartReasons returns why the kubelet must be restarted to load what
// changed: one reason for every change it does not load by itself. None
// means no restart. It rests on what the kubelet v1.36 does, recorded with
// the code behind it in docs/explanation/kubelet-credentials.md:
//
//   - it builds its API client from --kubeconfig once, at start, and with
//     certificate rotation never reloads the kubeconfig's certificate-authority;
//   - its client certificate manager reads its store (kubelet-client-current.pem)
//     once, at start, and never re-reads a pair written by someone else;
//   - with serverTLSBootstrap its serving certificate manager, too, reads its
//     store (kubelet-server-current.pem) once, at start, and otherwise asks
//     for a new certificate only late in the certificate's life;
//   - it watches authentication.x509.clientCAFile and reloads it by itself
//     (k8s.io/apiserver dynamiccertificates), so a new kubelet bundle needs no
//     restart;
//   - it reads --bootstrap-kubeconfig only when it bootstraps, so a new
//     bundle there needs no restart either.
func RestartReasons(c Changes) []string {
	var reasons []string
	if c.KubeconfigCA {
		reasons = append(reasons, "the kubelet loads its kubeconfig's trust bundle only at start")
	}
	if c.ClientPair {
		reasons = append(reasons, "the kubelet reads its client certificate only at start")
	}
	if c.ServingPair {
		reasons = append(reasons, "the kubelet reads its serving certificate only at start")
	}
	return reasons
}
