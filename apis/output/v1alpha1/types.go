package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RotationPlan is what each phase of a Cluster's CA rotation will issue, re-sign and roll
// (`kubectl carousel rotation plan`).
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type RotationPlan struct {
	metav1.TypeMeta `json:",inline"`

	// Cluster is the Cluster's namespace/name.
	Cluster string `json:"cluster"`
	// Phase is the phase the Cluster's rotation is in now ("none (never rotated)" before the first).
	Phase string `json:"phase"`
	// Phases are the two user-triggered phases, in order.
	Phases []PhasePlan `json:"phases"`
	// NodesOutsidePools are the managed cluster's Nodes whose
	// carousel.dev/pool label is missing or names no pool of the Cluster's
	// spec.workers: no phase rolls them, and the old-CA usage gate holds
	// complete-ca-rotation while they are online.
	NodesOutsidePools []string `json:"nodesOutsidePools,omitempty"`
	// NodesUnknown says why the managed cluster's Nodes could not be read;
	// empty when they were.
	NodesUnknown string `json:"nodesUnknown,omitempty"`
}

// PhasePlan is one user-triggered phase of a rotation.
type PhasePlan struct {
	// Operation is the operation annotation that starts the phase.
	Operation string `json:"operation"`
	// Through is the phase the rotation is in while Carousel works.
	Through string `json:"through"`
	// Done is the phase the rotation ends in.
	Done string `json:"done"`
	// Steps are what Carousel does and waits for, in order.
	Steps []PlanStep `json:"steps"`
	// Then is what the user does once the phase is done.
	Then string `json:"then,omitempty"`
	// InsteadOf, when set, is the operation this phase replaces: it is not
	// a step after the phases before it, but another way out of the last.
	InsteadOf string `json:"insteadOf,omitempty"`
}

// PlanStep is one step of a phase.
type PlanStep struct {
	// Description is the step in words, its list included.
	Description string `json:"description"`
	// List names what Items or WorkerPools list: caRoles, workloads, clientCertificates, serverCertificates or
	// workerPools; empty for a step that lists nothing.
	List string `json:"list,omitempty"`
	// Items are what the step lists: CA roles, certificates or workloads.
	Items []string `json:"items,omitempty"`
	// WorkerPools are the pools the step rolls, with their nodes.
	WorkerPools []WorkerPoolPlan `json:"workerPools,omitempty"`
}

// WorkerPoolPlan is a worker pool a step rolls.
type WorkerPoolPlan struct {
	// Name is the pool's name in the Cluster's spec.workers.
	Name string `json:"name"`
	// RolloutStrategy is how the pool is rolled: InPlace, Replace or Manual.
	RolloutStrategy string `json:"rolloutStrategy"`
	// MachineDeployment is the Cluster API MachineDeployment a Replace pool
	// rolls: Cluster API replaces its Machines.
	MachineDeployment string `json:"machineDeployment,omitempty"`
	// Nodes are the pool's nodes, read from the managed cluster.
	Nodes []string `json:"nodes,omitempty"`
	// NodesUnknown says why Nodes could not be read; empty when they were.
	NodesUnknown string `json:"nodesUnknown,omitempty"`
}

// CertificateExpirationInfo is when each certificate and CA of a Cluster expires
// (`kubectl carousel certs check-expiration`).
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type CertificateExpirationInfo struct {
	metav1.TypeMeta `json:",inline"`

	// Cluster is the Cluster's namespace/name.
	Cluster string `json:"cluster"`
	// Certificates are the leaf certificates Carousel issues for the Cluster.
	Certificates []CertificateExpiration `json:"certificates"`
	// CertificateAuthorities are the CAs of each role: the current one and, during a rotation, the previous one.
	CertificateAuthorities []CertificateAuthorityExpiration `json:"certificateAuthorities"`
}

// CertificateExpiration is one leaf certificate.
type CertificateExpiration struct {
	// Name identifies the certificate; it is the suffix of its Secret's name.
	Name string `json:"name"`
	// Secret is the Secret that holds it.
	Secret string `json:"secret"`
	// CertificateAuthority is the role of the CA that signs it.
	CertificateAuthority string `json:"certificateAuthority"`
	// Missing is true when the Secret does not exist; the times are then unset.
	Missing bool `json:"missing,omitempty"`
	// Unreadable says why the certificate in the Secret cannot be read; the
	// times are then unset.
	Unreadable string `json:"unreadable,omitempty"`
	// ExpirationDate is the certificate's notAfter.
	ExpirationDate *metav1.Time `json:"expirationDate,omitempty"`
	// ResidualTime is the time left until ExpirationDate, zero once expired.
	ResidualTime metav1.Duration `json:"residualTime"`
}

// CertificateAuthorityExpiration is one CA of a role.
type CertificateAuthorityExpiration struct {
	// Role is the CA's role.
	Role string `json:"role"`
	// Generation is current or previous.
	Generation string `json:"generation,omitempty"`
	// Missing is true when the role's CA Secret does not exist; the times are then unset.
	Missing bool `json:"missing,omitempty"`
	// Unreadable says why the role's CA Secret cannot be read; the times
	// and the generation are then unset.
	Unreadable string `json:"unreadable,omitempty"`
	// ExpirationDate is the CA certificate's notAfter.
	ExpirationDate *metav1.Time `json:"expirationDate,omitempty"`
	// ResidualTime is the time left until ExpirationDate, zero once expired.
	ResidualTime metav1.Duration `json:"residualTime"`
}
