package v1alpha1

// Condition types on a Cluster.
const (
	// ConditionReady is True when every CA, bundle, certificate and kubeconfig of
	// the Cluster is issued, current and published.
	ConditionReady = "Ready"
	// ConditionCARotation is True while a CA rotation is under way; its reason
	// names the step the rotation waits for.
	ConditionCARotation = "CARotationInProgress"
	// ConditionServiceAccountKeyRotation is True while a service-account key
	// rotation is under way; its reason names the step it waits for.
	ConditionServiceAccountKeyRotation = "ServiceAccountKeyRotationInProgress"
	// ConditionCAExpiring is True when a CA of the Cluster expires within the
	// manager's warning window.
	ConditionCAExpiring = "CAExpiringSoon"
	// ConditionControlPlaneReachable is True when Carousel can reach the managed
	// cluster's API server to gather evidence; False with
	// ReasonNoEndpoint when the spec names no endpoint and the checks that
	// need one are skipped.
	ConditionControlPlaneReachable = "ControlPlaneReachable"
	// ConditionCARotationRecommended is True when the manager's policy
	// recommends acting on the Cluster's CAs: starting a rotation, because
	// the last one is older than --ca-rotation-interval, or completing one
	// that has been Prepared for longer than --ca-rotation-prepared-warning.
	// The admission webhook returns the same advice as an API warning.
	ConditionCARotationRecommended = "CARotationRecommended"
	// ConditionMaintenanceOperationQueued is True while an operation queued
	// with the carousel.dev/maintenance-operation annotation waits: for the
	// maintenance window, or for the rotation's phase to allow it.
	ConditionMaintenanceOperationQueued = "MaintenanceOperationQueued"
	// ConditionAutomaticCARotationScheduled is set on a Cluster with
	// spec.caRotation.automatic: True while Carousel has a rotation operation
	// scheduled (not yet due, or due and waiting for the maintenance window),
	// False while there is nothing for it to do (a rotation is under way, or
	// Prepared without completeAfter). The message says which operation, when
	// and why.
	ConditionAutomaticCARotationScheduled = "AutomaticCARotationScheduled"
	// ConditionOldCAsUnused is set while a CA rotation is Prepared: True when
	// nothing Carousel knows of depends on the old CAs any more, so that
	// completing the rotation locks no client out; False while
	// status.credentials.rotation.certificateAuthorities.oldCAUsage names
	// anyone, and complete-ca-rotation is refused unless forced.
	ConditionOldCAsUnused = "OldCAsUnused"
)

// Reasons of the OldCAsUnused condition.
const (
	// ReasonNoOldCADependents (True): nothing depends on the old CAs.
	ReasonNoOldCADependents = "NoDependents"
	// ReasonOldCADependents (False): the message names who still does.
	ReasonOldCADependents = "OldCAsInUse"
)

// Reasons of the AutomaticCARotationScheduled condition; when the operation
// is due but waits, the reasons of MaintenanceOperationQueued say why.
const (
	// ReasonAutomaticOperationScheduled (True): the next operation becomes
	// due at the time the message names.
	ReasonAutomaticOperationScheduled = "Scheduled"
	// ReasonNothingScheduled (False): nothing is scheduled while the rotation
	// is in this phase.
	ReasonNothingScheduled = "NothingScheduled"
)

// Reasons of the MaintenanceOperationQueued condition.
const (
	// ReasonNothingQueued (False): no maintenance operation is queued.
	ReasonNothingQueued = "NothingQueued"
	// ReasonWaitingForMaintenanceWindow (True): the window is closed; the
	// message says when it opens next.
	ReasonWaitingForMaintenanceWindow = "WaitingForMaintenanceWindow"
	// ReasonMaintenanceWindowOpen (True): the window is open, the phase
	// allows the operation and nothing holds it: a pass carries it out next.
	ReasonMaintenanceWindowOpen = "WindowOpen"
	// ReasonMaintenanceOperationNotAllowed (True): the window was open when
	// Carousel last looked, but the rotation's phase did not allow the
	// operation yet; it runs in the first window after the phase does.
	ReasonMaintenanceOperationNotAllowed = "NotAllowedInPhase"
	// ReasonNoMaintenanceWindow (True): the Cluster has no valid
	// spec.maintenance.timeWindow.
	ReasonNoMaintenanceWindow = "NoMaintenanceWindow"
	// ReasonInvalidMaintenanceOperation (True): the annotation is not an
	// operation (it bypassed the webhook).
	ReasonInvalidMaintenanceOperation = "InvalidOperation"
)

// Reasons of the CARotationRecommended condition.
const (
	// ReasonRotationDue (True): the last rotation completed, or the Cluster
	// was created, longer ago than the rotation interval.
	ReasonRotationDue = "RotationDue"
	// ReasonCompletionDue (True): the rotation has been Prepared for longer
	// than the prepared warning.
	ReasonCompletionDue = "CompletionDue"
	// ReasonNothingDue (False): nothing is recommended now.
	ReasonNothingDue = "NothingDue"
)

// Reasons of the Ready, CAExpiringSoon and ControlPlaneReachable conditions.
// The CARotationInProgress condition's reasons name the step a rotation waits
// for; they are documented in docs/reference/controller-manager.md.
const (
	ReasonCredentialsIssued   = "CredentialsIssued"
	ReasonReconcileFailed     = "ReconcileFailed"
	ReasonCAValid             = "CAValid"
	ReasonCAExpiring          = "CAExpiring"
	ReasonNoEndpoint          = "NoEndpoint"
	ReasonEndpointReachable   = "EndpointReachable"
	ReasonEndpointUnreachable = "EndpointUnreachable"
	// ReasonNoCheckDue (ControlPlaneReachable, Unknown) means the spec names
	// an endpoint and no step has checked it yet.
	ReasonNoCheckDue = "NoCheckDue"
	// ReasonEndpointRemoved (ControlPlaneReachable) means the endpoint was
	// removed from the spec during a CA rotation that had recorded one; the
	// rotation holds until an endpoint is set again.
	ReasonEndpointRemoved = "EndpointRemoved"
	// ReasonCALost (Ready) means a CA Secret the status inventory lists is
	// gone, or holds neither as current nor as previous the CA the inventory
	// records as current (it was put back from an older copy). Carousel
	// neither replaces it nor goes back to the older CA by itself: restore
	// it, or, outside a rotation, accept a new CA (or the older one) with the
	// reissue-ca operation.
	ReasonCALost = "CALost"
	// ReasonCASecretUnlabelled (Ready) means a CA Secret exists but lacks
	// Carousel's labels, so the operator's cache cannot see it.
	ReasonCASecretUnlabelled = "CASecretUnlabelled"
	// ReasonServiceAccountKeyLost (Ready) means the service-account key
	// Secret of a Cluster whose credentials were issued is gone. Carousel
	// does not replace it by itself (every ServiceAccount token would stop
	// being valid): restore it, or accept a new key with the
	// reissue-service-account-key operation.
	ReasonServiceAccountKeyLost = "ServiceAccountKeyLost"
	// ReasonServiceAccountKeyUnlabelled (Ready) means the service-account key
	// Secret exists but lacks Carousel's labels.
	ReasonServiceAccountKeyUnlabelled = "ServiceAccountKeyUnlabelled"
	// ReasonObjectUnlabelled (Ready) means a Secret or ConfigMap Carousel
	// wrote for the Cluster (the Cluster is its controller) lacks the
	// Cluster's carousel.dev/cluster label, so the operator's cache cannot
	// see it and its create is refused.
	ReasonObjectUnlabelled = "ObjectUnlabelled"
	// ReasonNameTaken (Ready) means a Secret or ConfigMap that is not the
	// Cluster's (another Cluster's label, another controller, or neither the
	// Cluster's label nor a controller) holds a name Carousel writes one of
	// the Cluster's objects under. Carousel does not take it over.
	ReasonNameTaken = "NameTaken"
)

// Event reasons Carousel records on a Cluster.
const (
	EventRotationPhaseChanged = "CARotationPhaseChanged"
	// EventServiceAccountKeyRotationPhaseChanged: the service-account key
	// rotation entered a phase.
	EventServiceAccountKeyRotationPhaseChanged = "ServiceAccountKeyRotationPhaseChanged"
	EventCAGenerated                           = "CAGenerated"
	EventCARemoved                             = "CARemoved"
	// EventCARestored: abort-ca-rotation made a role's old CA current again.
	EventCARestored        = "CARestored"
	EventCertificateIssued = "CertificateIssued"
	EventOperationRefused  = "OperationRefused"
	// EventOperationNotRecorded (Warning): the write that records an
	// operation failed for another reason than a conflict; the annotation
	// stays, and the operation is tried again.
	EventOperationNotRecorded = "OperationNotRecorded"
	EventCAExpiringSoon       = "CAExpiringSoon"
	// EventCARotationRecommended (Warning) accompanies the
	// CARotationRecommended condition turning True, with its message.
	EventCARotationRecommended = "CARotationRecommended"
	// EventMaintenanceOperationStarted: the maintenance window opened and
	// the queued operation was moved to the operation annotation.
	EventMaintenanceOperationStarted = "MaintenanceOperationStarted"
	// EventMaintenanceOperationDropped: an operation carried out by hand
	// did, or made moot, the one queued for the maintenance window (an
	// abort, the completion queued), which would have started or completed
	// the next rotation.
	EventMaintenanceOperationDropped = "MaintenanceOperationDropped"
	// EventAutomaticCARotation: spec.caRotation.automatic made an operation
	// due inside the maintenance window, and it was moved to the operation
	// annotation; the message says why.
	EventAutomaticCARotation = "AutomaticCARotation"
	// EventCALost and EventCASecretUnlabelled (Warning) accompany the Ready
	// reasons of the same names.
	EventCALost             = "CALost"
	EventCASecretUnlabelled = "CASecretUnlabelled"
	// EventCAReissueAccepted records a reissue-ca operation.
	EventCAReissueAccepted = "CAReissueAccepted"
	// EventServiceAccountKeyReissued (Warning) records a new service-account
	// key accepted with reissue-service-account-key.
	EventServiceAccountKeyReissued = "ServiceAccountKeyReissued"
	// EventManagedCleanupAbandoned (Warning) says that a deleted Cluster, or
	// one whose endpoint was cleared, was released before Carousel could
	// remove its objects from the managed cluster, and what is left there.
	EventManagedCleanupAbandoned = "ManagedClusterCleanupAbandoned"
	// EventWorkerPoolRolledWithoutOfflineNodes (Warning) names the nodes an
	// InPlace rollout did not wait for because their Lease was older than the
	// newest node Lease by more than the pool's offlineNodeTimeout.
	EventWorkerPoolRolledWithoutOfflineNodes = "WorkerPoolRolledWithoutOfflineNodes"
	// EventMachineDeploymentRolled: Carousel set the rollout time of a
	// Replace pool's Cluster API MachineDeployment, once per phase; Cluster
	// API replaces its Machines.
	EventMachineDeploymentRolled = "MachineDeploymentRolled"
	// EventAPIServiceCABundleUpdated: Carousel wrote the metrics-server CA
	// bundle into an APIService of the managed cluster labelled
	// carousel.dev/ca-bundle=metrics-server.
	EventAPIServiceCABundleUpdated = "APIServiceCABundleUpdated"
	// EventAPIServiceCABundleNotWritten (Warning): the managed cluster
	// refused Carousel's write of an APIService's caBundle (an admission
	// webhook or policy, say); the note gives its answer. A rotation waits
	// for the APIService meanwhile.
	EventAPIServiceCABundleNotWritten = "APIServiceCABundleNotWritten"
	// EventBootstrapKubeconfigNotWritten (Warning) names a Secret that holds
	// the name of the Cluster's bootstrap kubeconfig without the Cluster's
	// label, which Carousel therefore cannot see or update.
	EventBootstrapKubeconfigNotWritten = "BootstrapKubeconfigNotWritten"
)

// RotationReason is the reason of the CARotationInProgress condition: the
// step a CA rotation waits for. Package rotation decides which applies.
type RotationReason string

// Reasons of the CARotationInProgress condition.
const (
	// ReasonNoRotation: no rotation is under way (the condition is False).
	ReasonNoRotation RotationReason = "NoRotationInProgress"
	// ReasonWaitingForNewCAs: Preparing generates and stores every role's new CA.
	ReasonWaitingForNewCAs RotationReason = "WaitingForNewCAs"
	// ReasonWaitingForConsumers: the control-plane workloads roll out with the
	// bundles and certificates written now.
	ReasonWaitingForConsumers RotationReason = "WaitingForConsumerRollout"
	// ReasonWaitingForClients: client certificates move to the new CAs once
	// every consumer, and the API server, trusts both.
	ReasonWaitingForClients RotationReason = "WaitingForClientCertificates"
	// ReasonWaitingForWorkers: worker pools listed in pendingWorkersRollouts,
	// and not held, still have to roll.
	ReasonWaitingForWorkers RotationReason = "WaitingForWorkerRollout"
	// ReasonWaitingForEvidence: the managed API server has not yet been seen
	// behaving as the phase requires.
	ReasonWaitingForEvidence RotationReason = "WaitingForEvidence"
	// ReasonWaitingForKubeRootCA: kube-root-ca.crt, the cluster CA bundle every
	// pod of the managed cluster trusts, is not yet the phase's bundle in
	// every namespace (both cluster CAs in Preparing, only the new one in
	// Finalizing); the condition names the namespaces behind.
	ReasonWaitingForKubeRootCA RotationReason = "WaitingForKubeRootCA"
	// ReasonWaitingForAPIServices: the caBundle of an APIService labelled
	// carousel.dev/ca-bundle=metrics-server in the managed cluster is not yet
	// the phase's metrics-server bundle; the condition names them.
	ReasonWaitingForAPIServices RotationReason = "WaitingForAPIServiceCABundles"
	// ReasonWaitingForWorkloadTrust: kube-root-ca.crt carries both cluster
	// CAs everywhere; Preparing gives pods spec.caRotation.workloadTrustReload
	// to reload it before it becomes Prepared.
	ReasonWaitingForWorkloadTrust RotationReason = "WaitingForWorkloadTrustReload"
	// ReasonWaitingForWorkersRolloutOperation: WaitingForWorkersRollout;
	// the user rolls the held worker pools with rotate-rollout-workers.
	ReasonWaitingForWorkersRolloutOperation RotationReason = "WaitingForRotateRolloutWorkersOperation"
	// ReasonWaitingForCompletion: Prepared; the user completes the rotation.
	ReasonWaitingForCompletion RotationReason = "WaitingForCompleteOperation"
	// ReasonWaitingForServers: Finalizing re-issues server certificates from
	// the new CAs.
	ReasonWaitingForServers RotationReason = "WaitingForServerCertificates"
	// ReasonWaitingForOldCADrop: servers must present their new certificates
	// before the old CAs are deleted.
	ReasonWaitingForOldCADrop RotationReason = "WaitingForOldCARemoval"
	// ReasonWaitingForOldCAsRestored: Aborting makes every role's old CA the
	// current one again.
	ReasonWaitingForOldCAsRestored RotationReason = "WaitingForOldCAsRestored"
	// ReasonWaitingForNewCADrop: Aborting deletes the new CAs once nothing
	// uses a certificate they signed.
	ReasonWaitingForNewCADrop RotationReason = "WaitingForNewCARemoval"
	// ReasonWaitingForKubeconfigHolders: Aborting keeps the new client CA
	// while users of kubectl carousel kubeconfig hold kubeconfigs from it
	// and have taken none from the old one since, until theirs expire or
	// abort-ca-rotation=force.
	ReasonWaitingForKubeconfigHolders RotationReason = "WaitingForKubeconfigHolders"
	// ReasonWaitingForKubeletHolders: Aborting keeps the new client CA while
	// the kubelets of Nodes of the managed cluster hold client certificates
	// Carousel signed from it, until they renew, theirs expire, their Nodes
	// are deleted, or abort-ca-rotation=force.
	ReasonWaitingForKubeletHolders RotationReason = "WaitingForKubeletHolders"

	// ReasonWaitingForNewServiceAccountKey: service-account key Preparing
	// generates and stores the new key.
	ReasonWaitingForNewServiceAccountKey RotationReason = "WaitingForNewServiceAccountKey"
	// ReasonWaitingForVerifyingAPIServers: service-account key Preparing waits
	// for every API server to verify tokens with both keys.
	ReasonWaitingForVerifyingAPIServers RotationReason = "WaitingForAPIServersToVerifyNewKey"
	// ReasonWaitingForSigningAPIServers: service-account key Preparing waits
	// for the API servers and kube-controller-manager to sign with the new key.
	ReasonWaitingForSigningAPIServers RotationReason = "WaitingForAPIServersToSignWithNewKey"
	// ReasonWaitingForTokenSecrets: service-account key Preparing waits for
	// kube-controller-manager to re-issue the tokens of the managed cluster's
	// kubernetes.io/service-account-token Secrets with the new key; the
	// message names the Secrets behind.
	ReasonWaitingForTokenSecrets RotationReason = "WaitingForServiceAccountTokenSecrets"
	// ReasonWaitingForWorkloadTokenRefresh: the new key signs everywhere;
	// service-account key Preparing gives pods
	// spec.serviceAccountKeyRotation.workloadTokenRefresh to replace their
	// projected tokens before it becomes Prepared.
	ReasonWaitingForWorkloadTokenRefresh RotationReason = "WaitingForWorkloadTokenRefresh"
	// ReasonWaitingForOldServiceAccountKeyDrop: service-account key
	// Finalizing waits for the API servers to stop accepting the old key.
	ReasonWaitingForOldServiceAccountKeyDrop RotationReason = "WaitingForOldServiceAccountKeyRemoval"
)

// The condition type on a RotationCampaign.
const (
	// ConditionCampaignProgressing is True while the campaign's step has
	// Clusters left to start or to finish and it may start them; False when
	// the step is done, or the campaign is paused or halted. The reason says
	// which.
	ConditionCampaignProgressing = "Progressing"
)

// Reasons of a RotationCampaign's Progressing condition.
const (
	// ReasonCampaignProgressing (True): Clusters are rotating or left to start.
	ReasonCampaignProgressing = "Progressing"
	// ReasonCampaignPaused (False): spec.paused is set.
	ReasonCampaignPaused = "Paused"
	// ReasonCampaignHalted (False): more Clusters failed than
	// spec.maxFailures allows; the message names them.
	ReasonCampaignHalted = "FailureBudgetExceeded"
	// ReasonCampaignStepDone (False): every selected Cluster finished the step.
	ReasonCampaignStepDone = "StepDone"
	// ReasonCampaignFailedClustersLeft (False): every selected Cluster is
	// done or skipped but failed ones, within spec.maxFailures and none
	// rotating any more; the step ends once they recover or leave the
	// selection. The message names them.
	ReasonCampaignFailedClustersLeft = "FailedClustersLeft"
	// ReasonCampaignNoClusterSelected (False): the selector picks no Cluster.
	ReasonCampaignNoClusterSelected = "NoClusterSelected"
	// ReasonCampaignInvalidSpec (False): the spec fails the checks the
	// admission webhook makes (stored while the webhook was off, or failing
	// open); the message says which. The campaign starts nothing.
	ReasonCampaignInvalidSpec = "InvalidSpec"
)

// Event reasons Carousel records on a RotationCampaign.
const (
	// EventCampaignOperationStarted: the campaign set the operation
	// annotation on a Cluster.
	EventCampaignOperationStarted = "OperationStarted"
	// EventCampaignHalted (Warning): the failure budget was exceeded.
	EventCampaignHalted = "Halted"
	// EventCampaignStepDone: every selected Cluster finished the step.
	EventCampaignStepDone = "StepDone"
)
