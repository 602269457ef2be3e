package rotation

// The service-account signing key rotation, next to the CA rotation and
// independent of it (rotate-credentials-* starts or completes both):
//
//	from                  on                                    to           the key Secret
//	none, Completed       rotate-serviceaccount-key-start       Preparing    Single
//	Preparing             (new key generated)                   Preparing    Staged: next key verifies, old key signs
//	Preparing             consumers rolled out Staged           Preparing    Switched: new key signs, both verify
//	Preparing             consumers rolled out Switched,        Prepared
//	                      every token Secret re-issued,
//	                      workloadTokenRefresh passed
//	Prepared              rotate-serviceaccount-key-complete    Finalizing
//	Finalizing            (old public key dropped)              Finalizing   Single: new key signs and verifies
//	Finalizing            consumers rolled out Single           Completed
//
// Preparing rolls the API servers twice: a replica that signs with the new
// key before every replica verifies it would hand out tokens the others
// reject. Every write of the key Secret carries the resourceVersion read, so
// a pass that decided on a stale read fails instead of generating a second
// new key.

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

// serviceAccountKeyAllowed is Allowed for the service-account key part of
// an operation.
func serviceAccountKeyAllowed(verb v1alpha1.OperationVerb, phase v1alpha1.ServiceAccountKeyRotationPhase) error {
	switch verb {
	case v1alpha1.VerbRotateServiceAccountKeyStart:
		if phase.RotationInProgress() {
			return fmt.Errorf("cannot start a service-account key rotation: the rotation is in phase %s: %s", phase, ServiceAccountKeyNextStep(phase))
		}
	case v1alpha1.VerbRotateServiceAccountKeyComplete:
		if phase != v1alpha1.ServiceAccountKeyPrepared {
			return fmt.Errorf("cannot complete the service-account key rotation in phase %s, only in phase %s: %s",
				ServiceAccountKeyPhaseName(phase), v1alpha1.ServiceAccountKeyPrepared, ServiceAccountKeyNextStep(phase))
		}
	}
	return nil
}

// ServiceAccountKeyNextStep says what a person does next in phase.
func ServiceAccountKeyNextStep(phase v1alpha1.ServiceAccountKeyRotationPhase) string {
	switch phase {
	case v1alpha1.ServiceAccountKeyPreparing:
		return "wait until the phase is Prepared"
	case v1alpha1.ServiceAccountKeyPrepared:
		return "complete it with " + v1alpha1.OperationAnnotation + "=" + string(v1alpha1.VerbRotateServiceAccountKeyComplete) +
			" once every workload holds a token signed by the new key"
	case v1alpha1.ServiceAccountKeyFinalizing:
		return "wait until the phase is Completed"
	default:
		return "start one with " + v1alpha1.OperationAnnotation + "=" + string(v1alpha1.VerbRotateServiceAccountKeyStart)
	}
}

// ServiceAccountKeyPhaseName is a phase as shown to a person: the empty
// phase is named.
func ServiceAccountKeyPhaseName(phase v1alpha1.ServiceAccountKeyRotationPhase) string {
	if phase == "" {
		return "none (never rotated)"
	}
	return string(phase)
}

// ApplyServiceAccountKeyOperation returns the service-account key rotation
// status after an operation (rot itself for an operation without a
// service-account key part), or an error when the operation is not allowed
// now. It does not modify rot.
func ApplyServiceAccountKeyOperation(rot *v1alpha1.ServiceAccountKeyRotation, verb v1alpha1.OperationVerb,
	now metav1.Time) (*v1alpha1.ServiceAccountKeyRotation, error) {
	verb = verb.ServiceAccountKeyVerb()
	if verb == "" {
		return rot, nil
	}
	var phase v1alpha1.ServiceAccountKeyRotationPhase
	next := &v1alpha1.ServiceAccountKeyRotation{}
	if rot != nil {
		phase, next = rot.Phase, rot.DeepCopy()
	}
	if err := serviceAccountKeyAllowed(verb, phase); err != nil {
		return nil, err
	}
	switch verb {
	case v1alpha1.VerbRotateServiceAccountKeyStart:
		now = startTime(next.LastInitiationTime, now)
		next.Phase = v1alpha1.ServiceAccountKeyPreparing
		next.LastInitiationTime = &now
		next.LastInitiationFinishedTime = nil
		next.NewKeySigningTime = nil // recorded by RecordNewKeySigning for this rotation
		next.CheckedEndpoint = ""    // recorded by TrackServiceAccountKeyEndpoint for this rotation
	case v1alpha1.VerbRotateServiceAccountKeyComplete:
		next.Phase = v1alpha1.ServiceAccountKeyFinalizing
		next.LastCompletionTriggeredTime = &now
	}
	return next, nil
}

// ServiceAccountKeyAlreadyApplied reports whether the service-account key
// rotation status already reflects the operation's service-account key part,
// or the operation has none: the status was written and then the reconcile
// stopped before the annotation was removed.
func ServiceAccountKeyAlreadyApplied(rot *v1alpha1.ServiceAccountKeyRotation, verb v1alpha1.OperationVerb) bool {
	var phase v1alpha1.ServiceAccountKeyRotationPhase
	if rot != nil {
		phase = rot.Phase
	}
	switch verb.ServiceAccountKeyVerb() {
	case v1alpha1.VerbRotateServiceAccountKeyStart:
		return phase == v1alpha1.ServiceAccountKeyPreparing
	case v1alpha1.VerbRotateServiceAccountKeyComplete:
		return phase == v1alpha1.ServiceAccountKeyFinalizing
	}
	return true
}

// ServiceAccountKeyFacts are what a reconcile observed of a service-account
// key rotation.
type ServiceAccountKeyFacts struct {
	Phase v1alpha1.ServiceAccountKeyRotationPhase
	// Stage is what the key Secret holds.
	Stage credentials.ServiceAccountKeyStage
	// StagedInThisRotation: the key Secret was Staged by the rotation under
	// way (its carousel.dev/rotation annotation is the rotation's
	// lastInitiationTime). A Single key then means the status read is
	// behind the Secret, never that a new key is due.
	StagedInThisRotation bool
	// ConsumersRolledOut: every consumer runs with the credentials written now.
	ConsumersRolledOut bool
	// TokenSecrets is what the check of the managed cluster's
	// kubernetes.io/service-account-token Secrets observed (see
	// TokenSecretsCheckDue): Passed when the new key signed every token;
	// TokenSecretsBehind names the Secrets it has not signed yet.
	TokenSecrets       Evidence
	TokenSecretsBehind []string
	// NewKeySigning is when the new key was first seen signing everywhere
	// in this Preparing (zero before); WorkloadTokenRefresh is how long pods
	// get from then to replace their tokens, and Now the time of the pass.
	NewKeySigning        time.Time
	WorkloadTokenRefresh time.Duration
	Now                  time.Time
}

// RecordNewKeySigning returns the rotation status with the time the new key
// was first seen signing everywhere (rot itself when there is nothing to
// record): the start of the time pods get to replace their tokens. It does
// not modify rot.
func RecordNewKeySigning(rot *v1alpha1.ServiceAccountKeyRotation, f ServiceAccountKeyFacts, now metav1.Time) *v1alpha1.ServiceAccountKeyRotation {
	if rot == nil || rot.NewKeySigningTime != nil || !TokenSecretsCheckDue(f) || !tokenSecretsDone(f) {
		return rot
	}
	next := rot.DeepCopy()
	next.NewKeySigningTime = &now
	return next
}

// TokenSecretsCheckDue reports whether the pass must re-issue the managed
// cluster's service-account token Secrets and check them: in Preparing, once
// every consumer signs with the new key, until a pass found them all
// re-issued (NewKeySigning): kube-controller-manager signs the Secrets
// created since with the new key.
func TokenSecretsCheckDue(f ServiceAccountKeyFacts) bool {
	return f.Phase == v1alpha1.ServiceAccountKeyPreparing && f.Stage == credentials.ServiceAccountKeySwitched && f.ConsumersRolledOut &&
		f.NewKeySigning.IsZero()
}

// tokenSecretsDone: the new key signed every token Secret, or there is no
// endpoint to check them through.
func tokenSecretsDone(f ServiceAccountKeyFacts) bool {
	return f.TokenSecrets == EvidencePassed || f.TokenSecrets == EvidenceSkipped
}

// ServiceAccountKeyDecision is what the reconciler does after a pass.
type ServiceAccountKeyDecision struct {
	// Phase is the phase after this pass; when it differs from the facts'
	// the reconciler records it.
	Phase v1alpha1.ServiceAccountKeyRotationPhase
	// Write is the stage the key Secret moves to now; empty when it stays.
	// Staged generates the new key.
	Write credentials.ServiceAccountKeyStage
	// Reason and Message say what Phase waits for (in Prepared, the
	// complete operation); empty outside a rotation.
	Reason  v1alpha1.RotationReason
	Message string
	// PollManaged says that what the phase waits for happens in the managed
	// cluster, which raises no event here: the reconciler looks again.
	PollManaged bool
	// Until, when set, is the time the phase waits for.
	Until time.Time
}

// DecideServiceAccountKey maps what a pass observed of a service-account key
// rotation to the phase after it, the write it needs and what it waits for.
func DecideServiceAccountKey(f ServiceAccountKeyFacts) ServiceAccountKeyDecision {
	d := ServiceAccountKeyDecision{Phase: f.Phase}
	waitForRollout := func(reason v1alpha1.RotationReason, what string) ServiceAccountKeyDecision {
		d.Reason, d.Message = reason, "waiting for the control-plane workloads to roll out: "+what
		return d
	}
	const (
		verifyingBoth = "every API server must verify tokens with the old and the new key before one signs with the new key"
		signingNew    = "the API servers and kube-controller-manager sign with the new key"
		droppingOld   = "the API servers stop accepting tokens of the old key"
	)
	switch f.Phase {
	case v1alpha1.ServiceAccountKeyPreparing:
		switch {
		case f.Stage == credentials.ServiceAccountKeySingle:
			if !f.StagedInThisRotation {
				d.Write = credentials.ServiceAccountKeyStaged
			}
			d.Reason, d.Message = v1alpha1.ReasonWaitingForNewServiceAccountKey, "generating and storing the new service-account key"
		case !f.ConsumersRolledOut && f.Stage == credentials.ServiceAccountKeyStaged:
			return waitForRollout(v1alpha1.ReasonWaitingForVerifyingAPIServers, verifyingBoth)
		case f.Stage == credentials.ServiceAccountKeyStaged:
			d.Write = credentials.ServiceAccountKeySwitched
			return waitForRollout(v1alpha1.ReasonWaitingForSigningAPIServers, signingNew)
		case !f.ConsumersRolledOut:
			return waitForRollout(v1alpha1.ReasonWaitingForSigningAPIServers, signingNew)
		case f.NewKeySigning.IsZero() && !tokenSecretsDone(f):
			d.Reason, d.PollManaged = v1alpha1.ReasonWaitingForTokenSecrets, true
			d.Message = "waiting for kube-controller-manager to re-issue the tokens of kubernetes.io/service-account-token Secrets with the new key"
			if n := len(f.TokenSecretsBehind); n > 0 {
				d.Message += fmt.Sprintf(": %d Secret(s) behind: %s", n, listSome(f.TokenSecretsBehind, 5))
			}
		case f.WorkloadTokenRefresh > 0 && f.NewKeySigning.IsZero():
			d.Reason, d.Message = v1alpha1.ReasonWaitingForWorkloadTokenRefresh, "waiting to record when the new key signed everywhere"
		case f.WorkloadTokenRefresh > 0 && f.Now.Before(f.NewKeySigning.Add(f.WorkloadTokenRefresh)):
			d.Reason, d.Until = v1alpha1.ReasonWaitingForWorkloadTokenRefresh, f.NewKeySigning.Add(f.WorkloadTokenRefresh)
			d.Message = fmt.Sprintf("giving pods until %s to replace their service-account tokens, which the new key signs since %s "+
				"(spec.serviceAccountKeyRotation.workloadTokenRefresh: %s): kubelets replace a projected token at 80%% of its lifetime",
				d.Until.UTC().Format(time.RFC3339), f.NewKeySigning.UTC().Format(time.RFC3339), f.WorkloadTokenRefresh)
		default:
			d.Phase = v1alpha1.ServiceAccountKeyPrepared
		}
	case v1alpha1.ServiceAccountKeyFinalizing:
		switch {
		case f.Stage == credentials.ServiceAccountKeyStaged:
			// Only a hand-edited status completes from Staged: sign with
			// the new key first, as Preparing would.
			d.Write = credentials.ServiceAccountKeySwitched
			return waitForRollout(v1alpha1.ReasonWaitingForSigningAPIServers, signingNew)
		case f.Stage == credentials.ServiceAccountKeySwitched:
			d.Write = credentials.ServiceAccountKeySingle
			return waitForRollout(v1alpha1.ReasonWaitingForOldServiceAccountKeyDrop, droppingOld)
		case !f.ConsumersRolledOut:
			return waitForRollout(v1alpha1.ReasonWaitingForOldServiceAccountKeyDrop, droppingOld)
		default:
			d.Phase = v1alpha1.ServiceAccountKeyCompleted
		}
	}
	if d.Phase == v1alpha1.ServiceAccountKeyPrepared && d.Reason == "" {
		d.Reason, d.Message = v1alpha1.ReasonWaitingForCompletion, ServiceAccountKeyNextStep(d.Phase)
	}
	return d
}

// EnterServiceAccountKeyPhase returns the rotation status in a phase reached
// by observation, with the phase's timestamp. It does not modify rot.
func EnterServiceAccountKeyPhase(rot *v1alpha1.ServiceAccountKeyRotation, phase v1alpha1.ServiceAccountKeyRotationPhase,
	now metav1.Time) *v1alpha1.ServiceAccountKeyRotation {
	next := &v1alpha1.ServiceAccountKeyRotation{}
	if rot != nil {
		next = rot.DeepCopy()
	}
	next.Phase = phase
	switch phase {
	case v1alpha1.ServiceAccountKeyPrepared:
		next.LastInitiationFinishedTime = &now
	case v1alpha1.ServiceAccountKeyCompleted:
		next.LastCompletionTime = &now
	}
	return next
}

// ServiceAccountKeyRotationID identifies a service-account key rotation: its
// lastInitiationTime; empty outside a rotation.
func ServiceAccountKeyRotationID(rot *v1alpha1.ServiceAccountKeyRotation) string {
	if rot == nil || !rot.Phase.RotationInProgress() {
		return ""
	}
	return LastServiceAccountKeyRotationID(rot)
}

// LastServiceAccountKeyRotationID is the ID of the last service-account key
// rotation, under way or not; empty when the key was never rotated. The key
// Secret carries it (AnnotationRotation) from the rotation's staging of its
// new key on, and a key reissued after it: a copy of the Secret without it
// was made before that rotation.
func LastServiceAccountKeyRotationID(rot *v1alpha1.ServiceAccountKeyRotation) string {
	if rot == nil || rot.LastInitiationTime == nil {
		return ""
	}
	return rot.LastInitiationTime.UTC().Format(time.RFC3339)
}

// listSome joins the first n names, and says how many more there are.
func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
