package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Cluster is a Kubernetes cluster whose certificate authorities, trust bundles,
// control-plane certificates and kubelet client bootstrap Carousel owns.
//
// A CA rotation is started by annotating the Cluster with
// carousel.dev/operation=start-ca-rotation and completed, once the rotation is
// Prepared, with carousel.dev/operation=complete-ca-rotation.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,categories=carousel
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Rotation",type=string,JSONPath=`.status.credentials.rotation.certificateAuthorities.phase`,description="Phase of the CA rotation"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="Whether every credential of the cluster is issued and current"
// +kubebuilder:printcolumn:name="Recommended",type=string,JSONPath=`.status.conditions[?(@.type=="CARotationRecommended")].reason`,description="What the manager recommends: RotationDue, CompletionDue or NothingDue"
// +kubebuilder:printcolumn:name="CA Expiry",type=string,JSONPath=`.status.credentials.earliestCAExpiry`,description="When the first of the cluster's certificate authorities expires"
// +kubebuilder:printcolumn:name="SA Key",type=string,JSONPath=`.status.credentials.rotation.serviceAccountKey.phase`,priority=1,description="Phase of the service-account key rotation"
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.kubernetesVersion`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterSpec   `json:"spec"`
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterList is a list of Clusters.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []Cluster `json:"items"`
}

// ClusterSpec is the desired state of a managed cluster's credentials.
type ClusterSpec struct {
	// KubernetesVersion is the version of the managed cluster's control plane,
	// for example "1.36.3". It must lie within SupportedKubernetesVersions.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^v?[0-9]+\.[0-9]+\.[0-9]+([-+].*)?$`
	KubernetesVersion string `json:"kubernetesVersion"`

	// ControlPlane says where the managed cluster's API server is reachable and
	// which names its serving certificate carries.
	//
	// +optional
	ControlPlane ControlPlaneSpec `json:"controlPlane,omitempty"`

	// Certificates sets the key algorithm and validity of every certificate
	// Carousel issues for this cluster.
	//
	// +optional
	// +kubebuilder:default={}
	Certificates CertificateSettings `json:"certificates,omitempty"`

	// Workers are the cluster's worker pools. During a CA rotation every pool is
	// rolled with its strategy so that its kubelets trust both CAs and hold a
	// client certificate from the new client CA.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Workers []WorkerPool `json:"workers,omitempty"`

	// KubeletBootstrap configures the kubelet client-certificate bootstrap flow
	// (bootstrap tokens and CSR approval) Carousel runs in the managed cluster.
	//
	// +optional
	// +kubebuilder:default={}
	KubeletBootstrap KubeletBootstrapSpec `json:"kubeletBootstrap,omitempty"`

	// CARotation configures how the cluster's CA rotations proceed.
	//
	// +optional
	// +kubebuilder:default={}
	CARotation CARotationSettings `json:"caRotation,omitempty"`

	// ServiceAccountKeyRotation configures how the cluster's service-account
	// signing key rotations proceed.
	//
	// +optional
	// +kubebuilder:default={}
	ServiceAccountKeyRotation ServiceAccountKeyRotationSettings `json:"serviceAccountKeyRotation,omitempty"`

	// Maintenance sets when Carousel carries out the operations queued with
	// the carousel.dev/maintenance-operation annotation.
	//
	// +optional
	Maintenance *MaintenanceSpec `json:"maintenance,omitempty"`
}

// MaintenanceSpec sets a Cluster's maintenance time window.
type MaintenanceSpec struct {
	// TimeWindow is the daily window in which queued operations are carried out.
	//
	// +required
	TimeWindow MaintenanceTimeWindow `json:"timeWindow"`
}

// MaintenanceTimeWindow is a daily time window that lasts between 30 minutes
// and 6 hours and may span midnight. Each end is a time of day with its UTC
// offset, HHMMSS+ZZZZ: for example begin 220000+0100 and end 010000+0100.
// The offset is fixed: the window does not follow daylight saving time.
type MaintenanceTimeWindow struct {
	// Begin is when the window opens.
	//
	// +required
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3])[0-5][0-9][0-5][0-9][+-]([01][0-9]|2[0-3])[0-5][0-9]$`
	Begin string `json:"begin"`
	// End is when the window closes.
	//
	// +required
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3])[0-5][0-9][0-5][0-9][+-]([01][0-9]|2[0-3])[0-5][0-9]$`
	End string `json:"end"`
}

// CARotationSettings configures how a cluster's CA rotations proceed.
type CARotationSettings struct {
	// WorkloadTrustReload is how long Preparing waits, once kube-root-ca.crt
	// carries both cluster CAs in every namespace, before it becomes Prepared.
	// A pod trusts the API server through the kube-root-ca.crt its kubelet
	// projects into it: the kubelet rewrites the file at the pod's next sync
	// (about every minute), and client-go reads the file again at most every
	// five minutes. complete-ca-rotation moves the API server's certificate
	// to the new cluster CA, which a pod trusts only once it did both. Between
	// 0 (for a cluster whose pods do not call the API server, or are all
	// restarted before completing) and MaxWorkloadTrustReload.
	//
	// +optional
	// +kubebuilder:default="7m"
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration(self)",message="must be a duration such as 90m or 24h"
	WorkloadTrustReload *metav1.Duration `json:"workloadTrustReload,omitempty"`

	// Automatic, when set, has Carousel start this Cluster's CA rotations on
	// its own, and complete them if CompleteAfter is set, inside the
	// maintenance window (spec.maintenance, required with it). The operations
	// are the ones a user would annotate: the admission rules, the phases and
	// the events are the same.
	//
	// +optional
	Automatic *AutomaticCARotation `json:"automatic,omitempty"`
}

// AutomaticCARotation is when Carousel starts and completes a Cluster's CA
// rotations on its own. A rotation starts at the first maintenance window
// after either trigger (validity used, interval) fires.
type AutomaticCARotation struct {
	// ValidityUsedPercent starts a rotation once the current CA of any role
	// has used this share of its validity (from its notBefore to its
	// notAfter), between 1 and 99.
	//
	// +optional
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	ValidityUsedPercent *int32 `json:"validityUsedPercent,omitempty"`

	// Interval, when set, also starts a rotation this long after the last one
	// completed, or after the Cluster was created if it never rotated; at
	// least an hour (each rotation rolls every node twice).
	//
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration(self)",message="must be a duration such as 90m or 24h"
	Interval *metav1.Duration `json:"interval,omitempty"`

	// CompleteAfter, when set, completes a rotation once it has been Prepared
	// this long (the soak), between 0 and 90 days. Unset, a
	// Prepared rotation waits for complete-ca-rotation: until then every
	// client that was not moved to the new CAs keeps working.
	//
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration(self)",message="must be a duration such as 90m or 24h"
	CompleteAfter *metav1.Duration `json:"completeAfter,omitempty"`
}

// ServiceAccountKeyRotationSettings configures how a cluster's
// service-account signing key rotations proceed.
type ServiceAccountKeyRotationSettings struct {
	// WorkloadTokenRefresh is how long Preparing waits, once every API server
	// signs with the new key, before it becomes Prepared. A pod authenticates
	// with the service-account token its kubelet projects into it, and the
	// kubelet replaces that token once 80% of its lifetime has passed (the
	// default lifetime is an hour), at the latest after 24 hours.
	// rotate-serviceaccount-key-complete drops the old key, so a pod still
	// holding a token of it is rejected from then on. Between 0 (for a cluster
	// whose pods do not call the API server, or are all restarted before
	// completing) and MaxWorkloadTokenRefresh.
	//
	// +optional
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration(self)",message="must be a duration such as 90m or 24h"
	WorkloadTokenRefresh *metav1.Duration `json:"workloadTokenRefresh,omitempty"`
}

// ControlPlaneSpec locates the managed cluster's API server.
type ControlPlaneSpec struct {
	// Endpoint is the https URL of the managed cluster's API server, for example
	// "https://10.0.0.1:6443". Empty means Carousel cannot reach the cluster: the
	// checks that need its API server are skipped and a condition says so.
	//
	// +optional
	// +kubebuilder:validation:Pattern=`^https://`
	Endpoint string `json:"endpoint,omitempty"`

	// ExtraSANs are additional DNS names or IP addresses put into the API
	// server's serving certificate, besides the endpoint's host and the
	// in-cluster names of the kubernetes Service.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	ExtraSANs []string `json:"extraSANs,omitempty"`
}

// KeyAlgorithm names the algorithm and size of a private key.
//
// +kubebuilder:validation:Enum=ECDSA-P256;ECDSA-P384;RSA-2048;RSA-3072;RSA-4096
type KeyAlgorithm string

// The key algorithms Carousel issues keys with.
const (
	KeyAlgorithmECDSAP256 KeyAlgorithm = "ECDSA-P256"
	KeyAlgorithmECDSAP384 KeyAlgorithm = "ECDSA-P384"
	KeyAlgorithmRSA2048   KeyAlgorithm = "RSA-2048"
	KeyAlgorithmRSA3072   KeyAlgorithm = "RSA-3072"
	KeyAlgorithmRSA4096   KeyAlgorithm = "RSA-4096"
)

// CertificateSettings sets how Carousel issues keys and certificates.
type CertificateSettings struct {
	// KeyAlgorithm is used for every CA and leaf key Carousel generates.
	//
	// +optional
	// +kubebuilder:default=ECDSA-P256
	KeyAlgorithm KeyAlgorithm `json:"keyAlgorithm,omitempty"`

	// CAValidity is the lifetime of a new certificate authority, between
	// MinCAValidity and MaxCAValidity.
	//
	// +optional
	// +kubebuilder:default="87600h"
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration(self)",message="must be a duration such as 90m or 24h"
	CAValidity *metav1.Duration `json:"caValidity,omitempty"`

	// LeafValidity is the lifetime of a leaf certificate, between
	// MinLeafValidity and MaxLeafValidity and shorter than CAValidity. A leaf's
	// NotAfter never passes its issuer's.
	//
	// +optional
	// +kubebuilder:default="8760h"
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration(self)",message="must be a duration such as 90m or 24h"
	LeafValidity *metav1.Duration `json:"leafValidity,omitempty"`
}

// WorkerRolloutStrategy says how a worker pool is rolled during a CA rotation.
//
// +kubebuilder:validation:Enum=InPlace;Replace;Manual
type WorkerRolloutStrategy string

// The worker rollout strategies.
const (
	// RolloutInPlace asks every node's agent to fetch the new trust bundle and
	// renew its kubelet client certificate in place.
	RolloutInPlace WorkerRolloutStrategy = "InPlace"
	// RolloutReplace rolls the pool's Cluster API MachineDeployment so that
	// new machines bootstrap with the new credentials.
	RolloutReplace WorkerRolloutStrategy = "Replace"
	// RolloutManual leaves the rollout to the user, who reports it with
	// carousel.dev/operation=rollout-workers=<pool>.
	RolloutManual WorkerRolloutStrategy = "Manual"
)

// WorkerPool is a group of nodes rolled together.
type WorkerPool struct {
	// Name identifies the pool; nodes carry it in the carousel.dev/pool label.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// RolloutStrategy says how the pool is rolled during a CA rotation.
	//
	// +optional
	// +kubebuilder:default=InPlace
	RolloutStrategy WorkerRolloutStrategy `json:"rolloutStrategy,omitempty"`

	// MachineDeployment is the name of the Cluster API MachineDeployment, in the
	// Cluster's namespace, that the Replace strategy rolls. Required for
	// Replace and refused for the other strategies.
	//
	// +optional
	MachineDeployment string `json:"machineDeployment,omitempty"`

	// MaxUnavailable is how many nodes of an InPlace pool renew their
	// credentials at a time, each restarting its kubelet: a number, or a
	// percentage of the pool's nodes rounded down; at least one node. Empty
	// means DefaultMaxUnavailable. Refused for the other strategies.
	//
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule="type(self) == string || (self >= -2147483648 && self <= 2147483647)",message="must be a 32-bit integer or a string"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// OfflineNodeTimeout is how far a node's Lease may fall behind the newest
	// node Lease of the cluster before an InPlace rollout stops waiting for
	// the node: once it stayed that far behind for 40s (a kubelet not
	// renewed yet since the API server was away catches up within
	// seconds), it counts as offline,
	// is not asked to renew, and is named in an event when the pool is
	// rolled without it. A node asked before it went silent is waited for
	// all the same, holding its slot, until it answers or its Node is
	// deleted: its renewal may be what took it down. An offline node that did not renew in Preparing
	// needs a fresh bootstrap kubeconfig if it comes back after the old CAs were dropped (one that did
	// still reaches the API server); an abort asks an offline node that holds a client
	// certificate from the new client CA once the pool is rolled, and waits for it. Between
	// MinOfflineNodeTimeout and MaxOfflineNodeTimeout; empty means
	// DefaultOfflineNodeTimeout. Refused for the other strategies.
	//
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration(self)",message="must be a duration such as 90m or 24h"
	OfflineNodeTimeout *metav1.Duration `json:"offlineNodeTimeout,omitempty"`
}

// ApprovalMode says whether Carousel approves a kind of kubelet CSR by itself.
//
// +kubebuilder:validation:Enum=Auto;Manual
type ApprovalMode string

// The CSR approval modes.
const (
	// ApprovalAuto lets Carousel approve CSRs that pass every check.
	ApprovalAuto ApprovalMode = "Auto"
	// ApprovalManual leaves CSRs for an administrator to approve.
	ApprovalManual ApprovalMode = "Manual"
)

// KubeletBootstrapSpec configures kubelet TLS bootstrapping for the cluster.
type KubeletBootstrapSpec struct {
	// TokenTTL is the lifetime of the bootstrap tokens Carousel issues, between
	// MinBootstrapTokenTTL and MaxBootstrapTokenTTL (one outside, written past
	// the webhook, counts as the nearer bound).
	//
	// +optional
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration(self)",message="must be a duration such as 90m or 24h"
	TokenTTL *metav1.Duration `json:"tokenTTL,omitempty"`

	// CSRApproval says which kubelet CSRs Carousel approves by itself.
	//
	// +optional
	// +kubebuilder:default={}
	CSRApproval CSRApprovalPolicy `json:"csrApproval,omitempty"`
}

// CSRApprovalPolicy says which kubelet certificate signing requests Carousel
// approves. Every approved request still has to pass the subject, usage and key
// checks.
type CSRApprovalPolicy struct {
	// Client covers kubelet client certificates
	// (kubernetes.io/kube-apiserver-client-kubelet), from bootstrap tokens and
	// from nodes renewing their own identity.
	//
	// +optional
	// +kubebuilder:default=Auto
	Client ApprovalMode `json:"client,omitempty"`

	// Serving covers kubelet serving certificates (kubernetes.io/kubelet-serving).
	// They are left for an administrator unless set to Auto, and then approved
	// only when every SAN is an address of the requesting Node, as
	// ServingAddresses defines it.
	//
	// +optional
	// +kubebuilder:default=Manual
	Serving ApprovalMode `json:"serving,omitempty"`

	// ServingAddresses says which addresses of a Node its automatically
	// approved serving certificates may carry. NodeStatus, the default, takes
	// the Node's status.addresses as they are now, as upstream approvers do;
	// the node writes them itself. FirstSeen takes those of them the Node
	// already had when Carousel first evaluated one of its serving CSRs,
	// recorded in the managed cluster's kube-system namespace where nodes
	// cannot write, so a compromised kubelet cannot add an address later.
	// Neither stops a bootstrap token from registering a Node under any name
	// it likes. Only used with Serving set to Auto.
	//
	// +optional
	// +kubebuilder:default=NodeStatus
	ServingAddresses ServingAddressPolicy `json:"servingAddresses,omitempty"`
}

// ServingAddressPolicy says which Node addresses an automatically approved
// kubelet serving certificate may carry.
//
// +kubebuilder:validation:Enum=NodeStatus;FirstSeen
type ServingAddressPolicy string

// The serving address policies.
const (
	// ServingAddressesNodeStatus approves the addresses the Node reports now.
	ServingAddressesNodeStatus ServingAddressPolicy = "NodeStatus"
	// ServingAddressesFirstSeen approves only the addresses the Node has now
	// and had when Carousel first saw it.
	ServingAddressesFirstSeen ServingAddressPolicy = "FirstSeen"
)

// ClusterStatus is the observed state of a managed cluster's credentials.
type ClusterStatus struct {
	// ObservedGeneration is the generation of the spec the status was computed from.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions are the latest observations of the Cluster's state. Their types
	// and reasons are the Condition* and Reason* constants of this package.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Credentials describes the cluster's certificate authorities and the state
	// of their rotation.
	//
	// +optional
	Credentials *ClusterCredentials `json:"credentials,omitempty"`
}

// ClusterCredentials describes a cluster's certificate authorities.
type ClusterCredentials struct {
	// Rotation is the state of credential rotations.
	//
	// +optional
	Rotation *CredentialsRotation `json:"rotation,omitempty"`

	// CertificateAuthorities is the inventory of the cluster's CAs, one entry
	// per role.
	//
	// +optional
	// +listType=map
	// +listMapKey=role
	CertificateAuthorities []CertificateAuthorityInventory `json:"certificateAuthorities,omitempty"`

	// EarliestCAExpiry is the earliest NotAfter among the cluster's CAs.
	//
	// +optional
	EarliestCAExpiry *metav1.Time `json:"earliestCAExpiry,omitempty"`
}

// CredentialsRotation is the state of the rotations of a cluster's credentials.
type CredentialsRotation struct {
	// CertificateAuthorities is the state of the CA rotation.
	//
	// +optional
	CertificateAuthorities *CARotation `json:"certificateAuthorities,omitempty"`

	// ServiceAccountKey is the state of the service-account signing key
	// rotation.
	//
	// +optional
	ServiceAccountKey *ServiceAccountKeyRotation `json:"serviceAccountKey,omitempty"`
}

// ServiceAccountKeyRotationPhase is a phase of a service-account signing key
// rotation.
//
// +kubebuilder:validation:Enum=Preparing;Prepared;Finalizing;Completed
type ServiceAccountKeyRotationPhase string

// The phases of a service-account key rotation, in order. A Cluster whose key
// was never rotated has no phase.
const (
	// ServiceAccountKeyPreparing: a new key exists; the API servers first
	// verify tokens with the old and the new key while still signing with the
	// old one, then sign with the new one.
	ServiceAccountKeyPreparing ServiceAccountKeyRotationPhase = "Preparing"
	// ServiceAccountKeyPrepared: every API server signs with the new key and
	// still accepts tokens of the old one; rotate-serviceaccount-key-complete
	// may be requested once workloads hold tokens of the new key.
	ServiceAccountKeyPrepared ServiceAccountKeyRotationPhase = "Prepared"
	// ServiceAccountKeyFinalizing: the old public key is dropped from the
	// API servers' verification keys.
	ServiceAccountKeyFinalizing ServiceAccountKeyRotationPhase = "Finalizing"
	// ServiceAccountKeyCompleted: only the new key signs and verifies.
	ServiceAccountKeyCompleted ServiceAccountKeyRotationPhase = "Completed"
)

// ServiceAccountKeyRotation is the state of a cluster's service-account
// signing key rotation.
type ServiceAccountKeyRotation struct {
	// Phase is the current phase; empty when the key was never rotated.
	//
	// +optional
	Phase ServiceAccountKeyRotationPhase `json:"phase,omitempty"`

	// LastInitiationTime is when the last rotation was started.
	//
	// +optional
	LastInitiationTime *metav1.Time `json:"lastInitiationTime,omitempty"`

	// LastInitiationFinishedTime is when the last rotation became Prepared.
	//
	// +optional
	LastInitiationFinishedTime *metav1.Time `json:"lastInitiationFinishedTime,omitempty"`

	// LastCompletionTriggeredTime is when completion of the last rotation was requested.
	//
	// +optional
	LastCompletionTriggeredTime *metav1.Time `json:"lastCompletionTriggeredTime,omitempty"`

	// LastCompletionTime is when the last rotation became Completed.
	//
	// +optional
	LastCompletionTime *metav1.Time `json:"lastCompletionTime,omitempty"`

	// NewKeySigningTime is when every API server and kube-controller-manager
	// were first seen signing with the new key, and every service-account
	// token Secret re-issued, in this rotation's Preparing. Prepared waits
	// spec.serviceAccountKeyRotation.workloadTokenRefresh from here.
	//
	// +optional
	NewKeySigningTime *metav1.Time `json:"newKeySigningTime,omitempty"`

	// CheckedEndpoint is the control-plane endpoint the check of the token
	// Secrets of the rotation under way runs against: spec.controlPlane.endpoint,
	// recorded in Preparing until the check passed, following a changed
	// endpoint. Once set, an endpoint removed from the spec meanwhile holds
	// the rotation instead of skipping the check. Empty when the rotation
	// runs without an endpoint.
	//
	// +optional
	CheckedEndpoint string `json:"checkedEndpoint,omitempty"`
}

// CARotationPhase is a phase of a CA rotation.
//
// +kubebuilder:validation:Enum=Preparing;PreparingWithoutWorkersRollout;WaitingForWorkersRollout;Prepared;Finalizing;Completed;Aborting;Aborted
type CARotationPhase string

// The phases of a CA rotation, in order. A Cluster that was never rotated has
// no phase.
const (
	// RotationPreparing: new CAs exist and are trusted next to the old ones,
	// client certificates are being re-issued and workers rolled.
	RotationPreparing CARotationPhase = "Preparing"
	// RotationPreparingWithoutWorkersRollout: Preparing for the control plane
	// only (start-ca-rotation-without-workers-rollout); every worker pool is
	// held and rolls only once rotate-rollout-workers names it.
	RotationPreparingWithoutWorkersRollout CARotationPhase = "PreparingWithoutWorkersRollout"
	// RotationWaitingForWorkersRollout: everything but the held worker pools
	// is prepared; rotate-rollout-workers=<pool>[,<pool>] rolls them.
	RotationWaitingForWorkersRollout CARotationPhase = "WaitingForWorkersRollout"
	// RotationPrepared: everything trusts both CAs and every client uses a
	// certificate from the new CA; complete-ca-rotation may be requested.
	RotationPrepared CARotationPhase = "Prepared"
	// RotationFinalizing: server certificates are being re-issued from the new
	// CAs and the old CAs dropped from every bundle.
	RotationFinalizing CARotationPhase = "Finalizing"
	// RotationCompleted: only the new CAs remain; the old CA keys are deleted.
	RotationCompleted CARotationPhase = "Completed"
	// RotationAborting: abort-ca-rotation took every role back to its old
	// CA; certificates issued from the new CAs are re-issued from the old
	// ones and the worker pools rolled back, then the new CAs are deleted.
	RotationAborting CARotationPhase = "Aborting"
	// RotationAborted: only the old CAs remain, as before the rotation
	// started; the new CA keys are deleted. A new rotation may start.
	RotationAborted CARotationPhase = "Aborted"
)

// CARotation is the state of a cluster's CA rotation.
type CARotation struct {
	// Phase is the current phase; empty when the cluster was never rotated.
	//
	// +optional
	Phase CARotationPhase `json:"phase,omitempty"`

	// LastInitiationTime is when the last rotation was started.
	//
	// +optional
	LastInitiationTime *metav1.Time `json:"lastInitiationTime,omitempty"`

	// LastInitiationFinishedTime is when the last rotation became Prepared.
	//
	// +optional
	LastInitiationFinishedTime *metav1.Time `json:"lastInitiationFinishedTime,omitempty"`

	// LastCompletionTriggeredTime is when completion of the last rotation was requested.
	//
	// +optional
	LastCompletionTriggeredTime *metav1.Time `json:"lastCompletionTriggeredTime,omitempty"`

	// LastCompletionTime is when the last rotation became Completed.
	//
	// +optional
	LastCompletionTime *metav1.Time `json:"lastCompletionTime,omitempty"`

	// LastAbortTriggeredTime is when the abort of the last rotation was
	// requested (abort-ca-rotation); absent when none was aborted.
	//
	// +optional
	LastAbortTriggeredTime *metav1.Time `json:"lastAbortTriggeredTime,omitempty"`

	// LastAbortTime is when the last aborted rotation became Aborted.
	//
	// +optional
	LastAbortTime *metav1.Time `json:"lastAbortTime,omitempty"`

	// AbortRolledBackTime is when, in Aborting, every certificate and
	// every worker pool was first seen back on the old CAs, with no user of
	// kubectl carousel kubeconfig holding a kubeconfig from the new client
	// CA only, nor a kubelet a client certificate from it or a serving
	// certificate from the new kubelet CA (or the abort forced). From then on
	// the new CAs are deleted, and the Replace and Manual pools roll once
	// more so that their nodes stop trusting them (in-place nodes trust the
	// old CAs alone from their first roll of the abort). Set from then until
	// the next rotation starts.
	//
	// +optional
	AbortRolledBackTime *metav1.Time `json:"abortRolledBackTime,omitempty"`

	// AbortForcedTime is when abort-ca-rotation=force told the abort not to
	// wait for the users of kubectl carousel kubeconfig who hold kubeconfigs
	// from the new client CA (WaitingForKubeconfigHolders), nor for the
	// kubelets holding client certificates from it, or serving certificates
	// from the new kubelet CA (WaitingForKubeletHolders). Set from then until
	// the next rotation starts.
	//
	// +optional
	AbortForcedTime *metav1.Time `json:"abortForcedTime,omitempty"`

	// PendingWorkersRollouts lists the worker pools still to be rolled in the
	// current phase. In phase 1 a pool added to spec.workers before clients
	// moved to the new client CA joins it (held too, without workers
	// rollout, while any pool is held): its nodes were given certificates
	// from the old CAs.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	PendingWorkersRollouts []PendingWorkersRollout `json:"pendingWorkersRollouts,omitempty"`

	// PoolsRolledByHand names the worker pools reported rolled with
	// carousel.dev/operation=rollout-workers=<pool> since the rotation
	// started. The old-CA usage gate takes the Nodes of these pools as the
	// user reported them; a Node of another pool that no worker rollout
	// moved (labelled into the pool since it rolled, or passed over) holds
	// the gate.
	//
	// +optional
	// +listType=set
	PoolsRolledByHand []string `json:"poolsRolledByHand,omitempty"`

	// KubeRootCAPublishedTime is when kube-root-ca.crt was first seen
	// carrying both cluster CAs in every namespace of the managed cluster
	// during this rotation's Preparing. Prepared waits
	// spec.caRotation.workloadTrustReload from here.
	//
	// +optional
	KubeRootCAPublishedTime *metav1.Time `json:"kubeRootCAPublishedTime,omitempty"`

	// CheckedEndpoint is the control-plane endpoint the API-server checks of
	// the rotation under way run against: spec.controlPlane.endpoint, recorded
	// while the rotation runs and following a changed endpoint. Once set, an
	// endpoint removed from the spec holds the rotation instead of skipping its
	// checks. Empty when the rotation runs without an endpoint.
	//
	// +optional
	CheckedEndpoint string `json:"checkedEndpoint,omitempty"`

	// UsageRecordUID is the UID of the Cluster's record of the client
	// certificates its API server saw in use (the ConfigMap
	// <cluster>-client-certificate-usage) when the rotation started, or of
	// the first one seen during the rotation; empty while the rotation has
	// seen none. A record with another UID, or none, was started over during
	// the rotation, without what the old-CA usage gate judges by: the gate then
	// names the managed cluster itself, and only a forced
	// complete-ca-rotation passes.
	//
	// +optional
	UsageRecordUID types.UID `json:"usageRecordUID,omitempty"`

	// KubeconfigRecordUID is, in the same way, the UID of the record of the
	// kubeconfigs kubectl carousel issued (the ConfigMap
	// <cluster>-issued-kubeconfigs). Once it is gone or another one, the
	// old-CA usage gate names the managed cluster, and an abort waits, as
	// for holders of kubeconfigs from the new client CA, until forced.
	//
	// +optional
	KubeconfigRecordUID types.UID `json:"kubeconfigRecordUID,omitempty"`

	// KubeletRecordUID is the UID of the record of the kubelet client
	// certificates Carousel signed (the ConfigMap
	// <cluster>-kubelet-client-certificates) when the rotation started, or
	// of the first one the old-CA usage gate read (in Prepared). Once it is
	// gone or another one, the gate names the managed cluster while some
	// Node, online or offline, has no node agent report on its kubelet's
	// certificate (an offline one with a node agent, which bootstraps its
	// kubelet again once back, aside).
	//
	// +optional
	KubeletRecordUID types.UID `json:"kubeletRecordUID,omitempty"`

	// OldCAUsage names, while the rotation is Prepared, who still depends
	// on the old CAs: complete-ca-rotation is refused while it names
	// anyone, unless forced (complete-ca-rotation=force). Absent in the
	// other phases.
	//
	// +optional
	OldCAUsage *OldCAUsage `json:"oldCAUsage,omitempty"`
}

// MaxOldCADependents is how many dependents OldCAUsage lists at most.
const MaxOldCADependents = 20

// OldCAUsage is who still depends on the old CAs of a Prepared rotation.
type OldCAUsage struct {
	// Dependents are the first MaxOldCADependents dependents: the managed
	// cluster itself, nodes, certificates, kubeconfigs, then users, each by
	// name.
	//
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Dependents []OldCADependent `json:"dependents,omitempty"`

	// Total is how many dependents there are, listed or not.
	Total int32 `json:"total"`

	// AuditEventsReceived is true once the managed API server's audit
	// webhook has sent Carousel the client certificates it saw in use. Without
	// them only Nodes and Carousel's own certificates are checked.
	//
	// +optional
	AuditEventsReceived bool `json:"auditEventsReceived,omitempty"`
}

// OldCADependentKind says what an OldCADependent is.
//
// +kubebuilder:validation:Enum=Node;Secret;Kubeconfig;User;Cluster
type OldCADependentKind string

// The kinds of dependents.
const (
	// OldCADependentNode is a Node whose node agent reports a client
	// certificate that the new client CA did not sign, or, without a node
	// agent, whose kubelet last got a certificate from the old client CA;
	// or a Node there before the rotation started that no worker rollout
	// moved to the new cluster CA: in no worker pool of the Cluster, or in
	// a pool whose rollout Carousel finished without it.
	OldCADependentNode OldCADependentKind = "Node"
	// OldCADependentSecret is a certificate Secret of the Cluster whose
	// certificate the new client CA did not sign.
	OldCADependentSecret OldCADependentKind = "Secret"
	// OldCADependentKubeconfig is a user of kubectl carousel kubeconfig
	// (carousel:admin:<name>) holding a kubeconfig from the old client CA
	// that has not expired, and none from the new client CA issued since.
	OldCADependentKubeconfig OldCADependentKind = "Kubeconfig"
	// OldCADependentUser is a user the managed API server saw authenticate
	// with a client certificate that the old client CA signed, or can only
	// have signed.
	OldCADependentUser OldCADependentKind = "User"
	// OldCADependentCluster stands for the managed cluster itself when its
	// Nodes could not be read: the gate cannot be evaluated.
	OldCADependentCluster OldCADependentKind = "Cluster"
)

// OldCADependent is one client that still depends on an old CA.
type OldCADependent struct {
	Kind OldCADependentKind `json:"kind"`
	// Name is the Node, Secret or user name (a Kubeconfig's is its user's).
	Name string `json:"name"`
	// Message says why it depends on the old CA.
	Message string `json:"message"`
	// LastSeen is when the managed API server last saw a user authenticate
	// that way; set for users only.
	//
	// +optional
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`
}

// PendingWorkersRollout is a worker pool whose rollout has not been observed yet.
type PendingWorkersRollout struct {
	// Name of the worker pool.
	Name string `json:"name"`

	// LastInitiationTime is when the rotation that requires this rollout was started.
	//
	// +optional
	LastInitiationTime *metav1.Time `json:"lastInitiationTime,omitempty"`

	// Held says that the pool is not rolled yet: the rotation was started
	// with start-ca-rotation-without-workers-rollout, and the pool rolls with
	// its strategy once carousel.dev/operation=rotate-rollout-workers=<pool>
	// names it.
	//
	// +optional
	Held bool `json:"held,omitempty"`
}

// CertificateAuthorityInventory describes the CAs of one role.
type CertificateAuthorityInventory struct {
	// Role of the CA.
	Role CARole `json:"role"`

	// Current is the CA Carousel issues from going forward: during a rotation,
	// the new CA.
	//
	// +optional
	Current *CertificateInfo `json:"current,omitempty"`

	// Previous is, while a rotation is under way, the old CA that is still trusted.
	//
	// +optional
	Previous *CertificateInfo `json:"previous,omitempty"`
}

// CertificateInfo identifies a certificate without revealing any key material.
type CertificateInfo struct {
	// Fingerprint is the lowercase hex SHA-256 digest of the certificate's DER.
	Fingerprint string `json:"fingerprint"`
	// NotBefore is the start of the certificate's validity.
	NotBefore metav1.Time `json:"notBefore"`
	// NotAfter is the end of the certificate's validity.
	NotAfter metav1.Time `json:"notAfter"`
}
