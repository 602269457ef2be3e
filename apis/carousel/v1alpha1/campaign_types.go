package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// RotationCampaign rotates the CAs of the Clusters its selector picks in its
// namespace, in waves: it starts (or, at the Complete step, completes) the
// rotation of at most spec.maxConcurrent Clusters at a time, the way a user
// would, with the carousel.dev/operation annotation, and the next ones as
// those finish. It halts when more than spec.maxFailures Clusters fail, and
// stops starting new ones while spec.paused is set. Each Cluster's own gates
// (its webhook, its phase) still decide whether an operation is allowed.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,categories=carousel,shortName=campaign
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.spec.step`,description="The step the campaign carries out: Start (phase 1) or Complete (phase 2)"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`,description="Where the campaign stands"
// +kubebuilder:printcolumn:name="Selected",type=integer,JSONPath=`.status.clusters.selected`
// +kubebuilder:printcolumn:name="Done",type=integer,JSONPath=`.status.clusters.done`
// +kubebuilder:printcolumn:name="In Progress",type=integer,JSONPath=`.status.clusters.inProgress`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.clusters.failed`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RotationCampaign struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RotationCampaignSpec   `json:"spec"`
	Status RotationCampaignStatus `json:"status,omitempty"`
}

// RotationCampaignList is a list of RotationCampaigns.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type RotationCampaignList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []RotationCampaign `json:"items"`
}

// CampaignStep is the operation a campaign carries out on its Clusters.
//
// +kubebuilder:validation:Enum=Start;Complete
type CampaignStep string

// The steps of a campaign, in order.
const (
	// CampaignStart starts phase 1 (start-ca-rotation) on every selected
	// Cluster that is not rotating, until each is Prepared.
	CampaignStart CampaignStep = "Start"
	// CampaignComplete completes phase 2 (complete-ca-rotation) on every
	// selected Cluster once it is Prepared, until each is Completed.
	CampaignComplete CampaignStep = "Complete"
)

// RotationCampaignSpec is what a campaign does, and how fast.
type RotationCampaignSpec struct {
	// Selector picks the campaign's Clusters in its namespace by label. It
	// must not be empty: select every Cluster with a label they all carry.
	//
	// +required
	Selector metav1.LabelSelector `json:"selector"`

	// Step is Start (phase 1 on every Cluster) or Complete (phase 2). A
	// campaign is created at Start and moved to Complete once its users are
	// ready; it never moves back.
	//
	// +optional
	// +kubebuilder:default=Start
	Step CampaignStep `json:"step,omitempty"`

	// MaxConcurrent is how many selected Clusters rotate at once: a number
	// of at least 1, or a percentage of the selected Clusters rounded up.
	// Empty means 1.
	//
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule="type(self) == string || (self >= -2147483648 && self <= 2147483647)",message="must be a 32-bit integer or a string"
	MaxConcurrent *intstr.IntOrString `json:"maxConcurrent,omitempty"`

	// MaxFailures is how many selected Clusters may fail before the campaign
	// halts: a number, or a percentage of the selected Clusters rounded
	// down. Empty means 0: the first failure halts it. A halted campaign
	// starts no new Cluster until the failures are resolved or the budget
	// is raised.
	//
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule="type(self) == string || (self >= -2147483648 && self <= 2147483647)",message="must be a 32-bit integer or a string"
	MaxFailures *intstr.IntOrString `json:"maxFailures,omitempty"`

	// ProgressDeadline is how long a Cluster's phase may take (from its
	// lastInitiationTime in its first phase, lastCompletionTriggeredTime in
	// Finalizing; at the Complete step too, a Cluster not Prepared yet
	// counts from lastInitiationTime) before it counts as failed. Between MinCampaignProgressDeadline and
	// MaxCampaignProgressDeadline; empty means DefaultCampaignProgressDeadline.
	//
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration(self)",message="must be a duration such as 90m or 24h"
	ProgressDeadline *metav1.Duration `json:"progressDeadline,omitempty"`

	// Paused stops the campaign from starting the operation on further
	// Clusters; the Clusters already rotating go on.
	//
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// CampaignPhase is where a campaign stands, derived for display from its
// step and the states of its Clusters.
type CampaignPhase string

// The phases of a campaign.
const (
	// CampaignStarting: the Start step is under way.
	CampaignStarting CampaignPhase = "Starting"
	// CampaignPrepared: every selected Cluster is Prepared (or went
	// further); set spec.step to Complete to go on.
	CampaignPrepared CampaignPhase = "Prepared"
	// CampaignCompleting: the Complete step is under way.
	CampaignCompleting CampaignPhase = "Completing"
	// CampaignCompleted: every selected Cluster is Completed.
	CampaignCompleted CampaignPhase = "Completed"
	// CampaignPaused: spec.paused is set and Clusters are left to do.
	CampaignPaused CampaignPhase = "Paused"
	// CampaignHalted: more Clusters failed than spec.maxFailures allows.
	CampaignHalted CampaignPhase = "Halted"
)

// CampaignClusterState is where one selected Cluster stands in the
// campaign's current step.
type CampaignClusterState string

// The states of a Cluster in a campaign's step.
const (
	// CampaignClusterPending: the operation has yet to be started on it.
	CampaignClusterPending CampaignClusterState = "Pending"
	// CampaignClusterWaiting: it cannot be started yet: its Ready condition
	// is missing or not of its current generation, another operation is
	// pending, or, at the Complete step, it is still preparing or the
	// old-CA usage gate holds its completion.
	CampaignClusterWaiting CampaignClusterState = "Waiting"
	// CampaignClusterInProgress: the operation was requested or its phase
	// is under way; it counts against maxConcurrent.
	CampaignClusterInProgress CampaignClusterState = "InProgress"
	// CampaignClusterDone: it reached the step's phase.
	CampaignClusterDone CampaignClusterState = "Done"
	// CampaignClusterSkipped: at the Complete step, a Cluster with nothing
	// for the campaign to complete: not rotated since the campaign started,
	// its rotation aborted, or started after the Complete step began.
	CampaignClusterSkipped CampaignClusterState = "Skipped"
	// CampaignClusterFailed: its Ready condition is False or Unknown, the operation is
	// refused, its phase took longer than spec.progressDeadline, or (at the
	// Start step) its rotation was aborted since the campaign started; it
	// counts against maxFailures.
	CampaignClusterFailed CampaignClusterState = "Failed"
)

// RotationCampaignStatus is where a campaign stands.
type RotationCampaignStatus struct {
	// ObservedGeneration is the generation of the spec this status is for.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is where the campaign stands.
	//
	// +optional
	Phase CampaignPhase `json:"phase,omitempty"`

	// StartTime is when the campaign first looked at its Clusters: a
	// Cluster whose lastInitiationTime is earlier has not been rotated by it.
	//
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// PreparedTime is when every selected Cluster was first seen Prepared.
	//
	// +optional
	PreparedTime *metav1.Time `json:"preparedTime,omitempty"`

	// CompleteStepTime is when the campaign first saw spec.step Complete
	// with no selected Cluster's start pending, or the latest
	// lastInitiationTime of the selected Clusters then, when that is later,
	// by a minute at most (another process's clock may run ahead). A
	// rotation started after it is not the campaign's to complete.
	//
	// +optional
	CompleteStepTime *metav1.Time `json:"completeStepTime,omitempty"`

	// CompletedTime is when every selected Cluster was first seen Completed.
	//
	// +optional
	CompletedTime *metav1.Time `json:"completedTime,omitempty"`

	// Clusters counts the selected Clusters by their state in the current step.
	//
	// +optional
	Clusters CampaignClusterCounts `json:"clusters,omitempty"`

	// RotationPhases counts the selected Clusters by the phase of their CA
	// rotation; "None" stands for a Cluster never rotated.
	//
	// +optional
	// +listType=map
	// +listMapKey=phase
	RotationPhases []RotationPhaseCount `json:"rotationPhases,omitempty"`

	// Blocking lists the Clusters that keep the step from finishing and are
	// not merely pending: failed ones first, then in progress and waiting,
	// each with why; at most MaxCampaignBlocking, by name.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	Blocking []CampaignCluster `json:"blocking,omitempty"`

	// Refused lists the selected Clusters that refused the campaign's
	// operation (the Cluster webhook refused it, or the Cluster controller
	// dropped it), each with the resourceVersion it refused in: such a
	// Cluster counts as failed, where it would otherwise be started, until
	// it changes. A manager that restarts, or
	// the shard that takes the campaign over, reads them back.
	//
	// +optional
	// +listType=map
	// +listMapKey=uid
	Refused []CampaignRefusal `json:"refused,omitempty"`

	// Conditions: Progressing.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// CampaignClusterCounts counts a campaign's Clusters by state; a state no
// Cluster is in is left out.
type CampaignClusterCounts struct {
	// +optional
	Selected int32 `json:"selected,omitempty"`
	// +optional
	Pending int32 `json:"pending,omitempty"`
	// +optional
	Waiting int32 `json:"waiting,omitempty"`
	// +optional
	InProgress int32 `json:"inProgress,omitempty"`
	// +optional
	Done int32 `json:"done,omitempty"`
	// +optional
	Skipped int32 `json:"skipped,omitempty"`
	// +optional
	Failed int32 `json:"failed,omitempty"`
}

// RotationPhaseCount is how many selected Clusters are in a rotation phase.
type RotationPhaseCount struct {
	Phase string `json:"phase"`
	Count int32  `json:"count"`
}

// CampaignCluster is a Cluster that keeps a campaign's step from finishing.
type CampaignCluster struct {
	Name    string               `json:"name"`
	State   CampaignClusterState `json:"state"`
	Message string               `json:"message,omitempty"`
}

// CampaignRefusal is a Cluster that refused a campaign's operation.
type CampaignRefusal struct {
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
	// ResourceVersion is the Cluster's when it refused.
	ResourceVersion string `json:"resourceVersion"`
	// Message says why, cut at 256 bytes.
	Message string `json:"message,omitempty"`
}
