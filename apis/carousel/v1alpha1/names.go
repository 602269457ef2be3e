package v1alpha1

// The operation annotation and the operations it takes.
const (
	// OperationAnnotation asks Carousel to perform an operation on a Cluster.
	// Carousel removes it once the operation is recorded in the status.
	OperationAnnotation = "carousel.dev/operation"
	// MaintenanceOperationAnnotation queues an operation (any value of
	// OperationAnnotation) for the Cluster's maintenance time window:
	// Carousel moves it to OperationAnnotation inside the window, once the
	// rotation's phase allows it.
	MaintenanceOperationAnnotation = "carousel.dev/maintenance-operation"

	// OperationStartCARotation starts phase 1 of a CA rotation (Preparing).
	OperationStartCARotation = string(VerbStartCARotation)
	// OperationStartCARotationWithoutWorkersRollout starts phase 1 for the
	// control plane only (PreparingWithoutWorkersRollout): every worker pool
	// waits for OperationRotateRolloutWorkersPrefix to name it.
	OperationStartCARotationWithoutWorkersRollout = string(VerbStartCARotationWithoutWorkersRollout)
	// OperationCompleteCARotation starts phase 2 of a CA rotation (Finalizing).
	OperationCompleteCARotation = string(VerbCompleteCARotation)
	// OperationForceSuffix, after complete-ca-rotation or
	// rotate-credentials-complete, completes the rotation although
	// status.credentials.rotation.certificateAuthorities.oldCAUsage names
	// clients that still depend on the old CAs: they lose access. After
	// abort-ca-rotation (in phase 1, Prepared or Aborting) it deletes the
	// new CAs without waiting for the users of kubectl carousel kubeconfig
	// who hold kubeconfigs from the new client CA: they lose access.
	OperationForceSuffix = "=force"
	// OperationAbortCARotation takes a rotation in phase 1 or Prepared back
	// to the old CAs (Aborting, then Aborted).
	OperationAbortCARotation = string(VerbAbortCARotation)
	// OperationReconcile asks for an immediate reconcile.
	OperationReconcile = string(VerbReconcile)
	// OperationRolloutWorkersPrefix, followed by a comma-separated list of pool
	// names, reports that those pools were rolled by hand.
	OperationRolloutWorkersPrefix = string(VerbRolloutWorkers) + "="
	// OperationRotateRolloutWorkersPrefix, followed by a comma-separated list
	// of pool names, rolls pools held by a rotation started with
	// OperationStartCARotationWithoutWorkersRollout, each with its strategy.
	OperationRotateRolloutWorkersPrefix = string(VerbRotateRolloutWorkers) + "="
	// OperationReissueCAPrefix, followed by a comma-separated list of CA roles,
	// accepts new CAs for roles whose CA Secret was lost outside a rotation.
	// Everything the lost CA signed stops being trusted; restoring the Secret
	// (kubectl carousel certs restore) is the way that keeps it.
	OperationReissueCAPrefix = string(VerbReissueCA) + "="
	// OperationReissueServiceAccountKey accepts a new service-account key
	// when its Secret was lost outside a restore.
	OperationReissueServiceAccountKey = string(VerbReissueServiceAccountKey)
)

// Labels Carousel puts on every object it manages in the management cluster.
const (
	// LabelCluster names the Cluster an object belongs to. Every managed object has it.
	LabelCluster = "carousel.dev/cluster"
	// LabelCA marks a CA Secret with its role.
	LabelCA = "carousel.dev/ca"
	// LabelCABundle marks a trust-bundle ConfigMap with its role.
	LabelCABundle = "carousel.dev/ca-bundle"
	// LabelCertificate marks a leaf certificate Secret with the certificate's name.
	LabelCertificate = "carousel.dev/certificate"
	// LabelSignedBy marks a leaf certificate Secret with the role of its issuer.
	LabelSignedBy = "carousel.dev/signed-by"
	// LabelPool marks a Node of the managed cluster with its worker pool.
	LabelPool = "carousel.dev/pool"
)

// Data keys of the Secrets and ConfigMaps Carousel writes.
const (
	DataKeyCertificate = "tls.crt"
	DataKeyPrivateKey  = "tls.key"
	DataKeyCABundle    = "ca.crt"
	DataKeyKubeconfig  = "kubeconfig"
)

// CARole is the job of a certificate authority in a cluster.
//
// +kubebuilder:validation:Enum=cluster;client;kubelet;etcd;front-proxy;metrics-server;vpn
type CARole string

// The CA roles. Each role has its own CA, rotated together with the others.
const (
	// CARoleCluster signs the API server's serving certificate and is the trust
	// anchor workloads find in kube-root-ca.crt.
	CARoleCluster CARole = "cluster"
	// CARoleClient signs the client certificates the API server accepts,
	// kubelet client certificates among them.
	CARoleClient CARole = "client"
	// CARoleKubelet signs the API server's client certificate for kubelets and
	// the kubelets' serving certificates.
	CARoleKubelet CARole = "kubelet"
	// CARoleEtcd signs etcd's serving, peer and client certificates.
	CARoleEtcd CARole = "etcd"
	// CARoleFrontProxy signs the aggregation layer's front-proxy client certificate.
	CARoleFrontProxy CARole = "front-proxy"
	// CARoleMetricsServer signs metrics-server's serving certificate.
	CARoleMetricsServer CARole = "metrics-server"
	// CARoleVPN signs the control-plane-to-node VPN's server and client certificates.
	CARoleVPN CARole = "vpn"
)

// CARoles lists every CA role in a fixed order.
func CARoles() []CARole {
	return []CARole{
		CARoleCluster, CARoleClient, CARoleKubelet, CARoleEtcd,
		CARoleFrontProxy, CARoleMetricsServer, CARoleVPN,
	}
}

// Annotations on a managed cluster's Node through which Carousel and the node
// agent carry out an in-place worker rollout.
const (
	// AnnotationRenewCredentials is set by Carousel: the node agent fetches the
	// current trust bundles and renews its client certificate, once per value.
	AnnotationRenewCredentials = "carousel.dev/renew-credentials"
	// AnnotationCredentialsRenewed is set by the node agent to the
	// AnnotationRenewCredentials value it carried out.
	AnnotationCredentialsRenewed = "carousel.dev/credentials-renewed"
	// AnnotationClientCertificateIssuer is set by the node agent: the hex
	// authority key identifier of its client certificate, so that Carousel
	// observes which client CA signed it.
	AnnotationClientCertificateIssuer = "carousel.dev/client-certificate-issuer"
	// AnnotationTrustBundle is set by the node agent: the hex SHA-256 of the
	// trust bundle it now uses for the API server.
	AnnotationTrustBundle = "carousel.dev/trust-bundle"
	// AnnotationKubeletTrustBundle is set by the node agent: the hex SHA-256
	// of the kubelet trust bundle (the kubelet's clientCAFile) the node now uses.
	AnnotationKubeletTrustBundle = "carousel.dev/kubelet-trust-bundle"
	// AnnotationServingCertificateIssuer is set by the node agent: the hex
	// authority key identifier of the kubelet's serving certificate, so that
	// Carousel observes which kubelet CA signed it. A node without a serving
	// certificate Carousel signs (the agent's stand-in mode) leaves it empty.
	AnnotationServingCertificateIssuer = "carousel.dev/serving-certificate-issuer"
	// AnnotationNodeAgent is set by the node agent once it watches the Node,
	// to its version: a node agent runs there, which brings the kubelet back
	// by itself when it was off through a rotation (it bootstraps again once
	// the API server refuses the old credentials), before it ever reports.
	AnnotationNodeAgent = "carousel.dev/node-agent"
)

// Keys Carousel writes on the objects it manages besides the Cluster, in the
// management and in the managed clusters.
const (
	// AnnotationRotation on a CA Secret records the lastInitiationTime of the
	// rotation that created its current CA; absent for a cluster's first CA.
	// It is how a restarted reconcile knows that a role's new CA exists
	// already, and never generates a second one.
	AnnotationRotation = "carousel.dev/rotation"
	// AnnotationAbortedRotation on a CA Secret records the lastInitiationTime
	// of the rotation abort-ca-rotation took it back from: its old CA is
	// current again, and the new one previous until it is deleted. It is how
	// a restarted reconcile knows the two were swapped already, and never
	// swaps them back.
	AnnotationAbortedRotation = "carousel.dev/aborted-rotation"
	// AnnotationCredentialsChecksum and AnnotationTrustChecksum on a consumer's
	// pod template roll it when the credentials it mounts, or the trust
	// bundles, change.
	AnnotationCredentialsChecksum = "carousel.dev/credentials-checksum"
	AnnotationTrustChecksum       = "carousel.dev/trust-checksum"
	// FinalizerManagedCleanup keeps a deleted Cluster until Carousel has
	// removed what it wrote into the managed cluster.
	FinalizerManagedCleanup = "carousel.dev/managed-cluster-cleanup"
	// LabelBootstrapToken marks, in the managed cluster, the bootstrap-token
	// Secrets Carousel issued; its value is the Cluster's name.
	LabelBootstrapToken = "carousel.dev/bootstrap-token"
	// LabelServingAddresses marks, in the managed cluster's kube-system, the
	// ConfigMaps that pin a Node's addresses for
	// csrApproval.servingAddresses=FirstSeen; its value is the Cluster's name.
	LabelServingAddresses = "carousel.dev/serving-addresses"
	// LabelCertsUpload marks the Secrets of a `kubectl carousel certs upload`
	// (the owning bootstrap token and the encrypted copy) with the Cluster's UID.
	LabelCertsUpload = "carousel.dev/certs-upload"
	// AnnotationRolledFor on a Cluster API MachineDeployment of a Replace
	// pool records the rotation phase Carousel rolled it for, as
	// <lastInitiationTime, RFC 3339>/<phase>, next to the rollout time it
	// set: a restarted reconcile rolls the MachineDeployment once per phase.
	AnnotationRolledFor = "carousel.dev/rolled-for"
	// AnnotationRolloutAfter on such a MachineDeployment records the rollout
	// time Carousel set for that phase (RFC 3339). Carousel plans with it,
	// not with the field alone, which another writer may move earlier or
	// clear: Carousel sets the field back to it.
	AnnotationRolloutAfter = "carousel.dev/rollout-after"
	// AnnotationCABundleInjectedAt on the manager's ValidatingWebhookConfiguration
	// records when its caBundle was seen holding a new webhook CA.
	AnnotationCABundleInjectedAt = "carousel.dev/ca-bundle-injected-at"
)
