package rotation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

func TestDecideServiceAccountKey(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	const (
		single   = credentials.ServiceAccountKeySingle
		staged   = credentials.ServiceAccountKeyStaged
		switched = credentials.ServiceAccountKeySwitched
	)
	for _, tc := range []struct {
		name   string
		facts  ServiceAccountKeyFacts
		phase  v1alpha1.ServiceAccountKeyRotationPhase
		write  credentials.ServiceAccountKeyStage
		reason v1alpha1.RotationReason
	}{
		{"no rotation", ServiceAccountKeyFacts{Stage: single, ConsumersRolledOut: true}, "", "", ""},
		{"completed", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyCompleted, Stage: single, ConsumersRolledOut: true},
			v1alpha1.ServiceAccountKeyCompleted, "", ""},
		{"start: stage a new key", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: single, ConsumersRolledOut: true},
			v1alpha1.ServiceAccountKeyPreparing, staged, v1alpha1.ReasonWaitingForNewServiceAccountKey},
		{"a status read behind a key this rotation staged: no second key",
			ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: single, StagedInThisRotation: true, ConsumersRolledOut: true},
			v1alpha1.ServiceAccountKeyPreparing, "", v1alpha1.ReasonWaitingForNewServiceAccountKey},
		{"staged, rolling: keep signing with the old key", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: staged},
			v1alpha1.ServiceAccountKeyPreparing, "", v1alpha1.ReasonWaitingForVerifyingAPIServers},
		{"staged, rolled out: sign with the new key", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: staged, ConsumersRolledOut: true},
			v1alpha1.ServiceAccountKeyPreparing, switched, v1alpha1.ReasonWaitingForSigningAPIServers},
		{"switched, rolling", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: switched},
			v1alpha1.ServiceAccountKeyPreparing, "", v1alpha1.ReasonWaitingForSigningAPIServers},
		{"switched, rolled out, token Secrets not checked yet", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: switched,
			ConsumersRolledOut: true, TokenSecrets: EvidencePending}, v1alpha1.ServiceAccountKeyPreparing, "", v1alpha1.ReasonWaitingForTokenSecrets},
		{"switched, rolled out, token Secrets behind", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: switched,
			ConsumersRolledOut: true, TokenSecrets: EvidencePending, TokenSecretsBehind: []string{"a/x"}}, v1alpha1.ServiceAccountKeyPreparing, "", v1alpha1.ReasonWaitingForTokenSecrets},
		{"switched, rolled out, every token Secret re-issued: Prepared", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: switched,
			ConsumersRolledOut: true, TokenSecrets: EvidencePassed}, v1alpha1.ServiceAccountKeyPrepared, "", v1alpha1.ReasonWaitingForCompletion},
		{"the new key signs everywhere, not recorded yet", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: switched,
			ConsumersRolledOut: true, TokenSecrets: EvidencePassed, WorkloadTokenRefresh: time.Hour, Now: t0},
			v1alpha1.ServiceAccountKeyPreparing, "", v1alpha1.ReasonWaitingForWorkloadTokenRefresh},
		{"pods replacing their tokens", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: switched,
			ConsumersRolledOut: true, TokenSecrets: EvidencePassed, WorkloadTokenRefresh: time.Hour, NewKeySigning: t0, Now: t0.Add(59 * time.Minute)},
			v1alpha1.ServiceAccountKeyPreparing, "", v1alpha1.ReasonWaitingForWorkloadTokenRefresh},
		{"token Secrets not checked again once a pass found them re-issued", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: switched,
			ConsumersRolledOut: true, WorkloadTokenRefresh: time.Hour, NewKeySigning: t0, Now: t0.Add(time.Minute)},
			v1alpha1.ServiceAccountKeyPreparing, "", v1alpha1.ReasonWaitingForWorkloadTokenRefresh},
		{"pods had workloadTokenRefresh: Prepared", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: switched,
			ConsumersRolledOut: true, TokenSecrets: EvidencePassed, WorkloadTokenRefresh: time.Hour, NewKeySigning: t0, Now: t0.Add(time.Hour)},
			v1alpha1.ServiceAccountKeyPrepared, "", v1alpha1.ReasonWaitingForCompletion},
		{"switched, rolled out, no endpoint to check: Prepared", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: switched,
			ConsumersRolledOut: true, TokenSecrets: EvidenceSkipped}, v1alpha1.ServiceAccountKeyPrepared, "", v1alpha1.ReasonWaitingForCompletion},
		{"prepared waits for the operation", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPrepared, Stage: switched, ConsumersRolledOut: true},
			v1alpha1.ServiceAccountKeyPrepared, "", v1alpha1.ReasonWaitingForCompletion},
		{"complete: drop the old public key", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyFinalizing, Stage: switched, ConsumersRolledOut: true},
			v1alpha1.ServiceAccountKeyFinalizing, single, v1alpha1.ReasonWaitingForOldServiceAccountKeyDrop},
		{"completing from staged signs with the new key first", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyFinalizing, Stage: staged, ConsumersRolledOut: true},
			v1alpha1.ServiceAccountKeyFinalizing, switched, v1alpha1.ReasonWaitingForSigningAPIServers},
		{"dropped, rolling", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyFinalizing, Stage: single},
			v1alpha1.ServiceAccountKeyFinalizing, "", v1alpha1.ReasonWaitingForOldServiceAccountKeyDrop},
		{"dropped, rolled out: Completed", ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyFinalizing, Stage: single, ConsumersRolledOut: true},
			v1alpha1.ServiceAccountKeyCompleted, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideServiceAccountKey(tc.facts)
			if d.Phase != tc.phase || d.Write != tc.write || d.Reason != tc.reason {
				t.Errorf("DecideServiceAccountKey = phase %q, write %q, reason %q; want %q, %q, %q", d.Phase, d.Write, d.Reason, tc.phase, tc.write, tc.reason)
			}
			if (d.Reason == "") != (d.Message == "") {
				t.Errorf("reason %q with message %q", d.Reason, d.Message)
			}
			if d.PollManaged != (d.Reason == v1alpha1.ReasonWaitingForTokenSecrets) {
				t.Errorf("PollManaged = %t waiting for %q", d.PollManaged, d.Reason)
			}
		})
	}
}

func TestWorkloadTokenRefreshIsCountedFromTheFirstPassThatSawTheNewKeySignEverywhere(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	signs := ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: credentials.ServiceAccountKeySwitched,
		ConsumersRolledOut: true, TokenSecrets: EvidencePassed, WorkloadTokenRefresh: time.Hour}
	rot := &v1alpha1.ServiceAccountKeyRotation{Phase: v1alpha1.ServiceAccountKeyPreparing}
	recorded := RecordNewKeySigning(rot, signs, now)
	if recorded == rot || recorded.NewKeySigningTime == nil || !recorded.NewKeySigningTime.Equal(&now) || rot.NewKeySigningTime != nil {
		t.Fatalf("RecordNewKeySigning = %+v (rot %+v)", recorded, rot)
	}
	later := metav1.NewTime(now.Add(time.Minute))
	if again := RecordNewKeySigning(recorded, signs, later); again != recorded {
		t.Errorf("recorded again: %+v", again)
	}
	behind := signs
	behind.TokenSecrets = EvidencePending
	if got := RecordNewKeySigning(rot, behind, now); got != rot {
		t.Errorf("recorded while token Secrets lag: %+v", got)
	}
	signs.NewKeySigning, signs.Now = now.Time, now.Add(time.Minute)
	if d := DecideServiceAccountKey(signs); !d.Until.Equal(now.Add(time.Hour)) || d.PollManaged {
		t.Errorf("Until = %s, PollManaged %t; want %s, false", d.Until, d.PollManaged, now.Add(time.Hour))
	}
}

func TestTokenSecretsMessageNamesTheFirstFive(t *testing.T) {
	d := DecideServiceAccountKey(ServiceAccountKeyFacts{Phase: v1alpha1.ServiceAccountKeyPreparing, Stage: credentials.ServiceAccountKeySwitched,
		ConsumersRolledOut: true, TokenSecrets: EvidencePending, TokenSecretsBehind: []string{"a/1", "a/2", "a/3", "a/4", "a/5", "b/6", "b/7"}})
	if want := "7 Secret(s) behind: a/1, a/2, a/3, a/4, a/5 and 2 more"; !strings.HasSuffix(d.Message, want) {
		t.Errorf("message %q does not end in %q", d.Message, want)
	}
}

func TestServiceAccountKeyOperations(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	inPhase := func(p v1alpha1.ServiceAccountKeyRotationPhase) *v1alpha1.ServiceAccountKeyRotation {
		return &v1alpha1.ServiceAccountKeyRotation{Phase: p}
	}
	for _, tc := range []struct {
		name   string
		rot    *v1alpha1.ServiceAccountKeyRotation
		verb   v1alpha1.OperationVerb
		phase  v1alpha1.ServiceAccountKeyRotationPhase
		refuse string
	}{
		{"start, never rotated", nil, v1alpha1.VerbRotateServiceAccountKeyStart, v1alpha1.ServiceAccountKeyPreparing, ""},
		{"start as part of rotate-credentials", inPhase(v1alpha1.ServiceAccountKeyCompleted), v1alpha1.VerbRotateCredentialsStart,
			v1alpha1.ServiceAccountKeyPreparing, ""},
		{"start while Prepared", inPhase(v1alpha1.ServiceAccountKeyPrepared), v1alpha1.VerbRotateServiceAccountKeyStart, "",
			"cannot start a service-account key rotation: the rotation is in phase Prepared: complete it with carousel.dev/operation=rotate-serviceaccount-key-complete once every workload holds a token signed by the new key"},
		{"complete while Preparing", inPhase(v1alpha1.ServiceAccountKeyPreparing), v1alpha1.VerbRotateCredentialsComplete, "",
			"cannot complete the service-account key rotation in phase Preparing, only in phase Prepared: wait until the phase is Prepared"},
		{"complete, never rotated", nil, v1alpha1.VerbRotateServiceAccountKeyComplete, "",
			"cannot complete the service-account key rotation in phase none (never rotated), only in phase Prepared: start one with carousel.dev/operation=rotate-serviceaccount-key-start"},
		{"complete from Prepared", inPhase(v1alpha1.ServiceAccountKeyPrepared), v1alpha1.VerbRotateServiceAccountKeyComplete, v1alpha1.ServiceAccountKeyFinalizing, ""},
		{"a CA operation leaves the key alone", inPhase(v1alpha1.ServiceAccountKeyPreparing), v1alpha1.VerbStartCARotation, v1alpha1.ServiceAccountKeyPreparing, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, err := ApplyServiceAccountKeyOperation(tc.rot, tc.verb, now)
			if tc.refuse != "" {
				if err == nil || err.Error() != tc.refuse {
					t.Fatalf("error = %v, want %q", err, tc.refuse)
				}
				if aerr := Allowed(tc.verb, Phases{CA: v1alpha1.RotationPrepared, ServiceAccountKey: phaseOrNone(tc.rot)}); aerr == nil || aerr.Error() != tc.refuse {
					t.Errorf("Allowed = %v, want the same refusal", aerr)
				}
				return
			}
			if err != nil || next.Phase != tc.phase {
				t.Fatalf("ApplyServiceAccountKeyOperation = %+v, %v; want phase %q", next, err, tc.phase)
			}
			if !ServiceAccountKeyAlreadyApplied(next, tc.verb) {
				t.Error("ServiceAccountKeyAlreadyApplied after the operation = false")
			}
		})
	}
}

func TestAServiceAccountKeyRotationStartedInTheSecondTheLastOneStartedGetsItsOwnID(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	completed := &v1alpha1.ServiceAccountKeyRotation{Phase: v1alpha1.ServiceAccountKeyCompleted, LastInitiationTime: &now}
	next, err := ApplyServiceAccountKeyOperation(completed, v1alpha1.VerbRotateServiceAccountKeyStart, now)
	if err != nil {
		t.Fatal(err)
	}
	if ServiceAccountKeyRotationID(next) == now.UTC().Format(time.RFC3339) {
		t.Errorf("the new rotation has the last one's ID %s: its key Secret would count as staged already", ServiceAccountKeyRotationID(next))
	}
}

func phaseOrNone(rot *v1alpha1.ServiceAccountKeyRotation) v1alpha1.ServiceAccountKeyRotationPhase {
	if rot == nil {
		return ""
	}
	return rot.Phase
}

func TestRotateCredentialsNeedsBothRotationsAllowed(t *testing.T) {
	err := Allowed(v1alpha1.VerbRotateCredentialsStart, Phases{CA: v1alpha1.RotationPrepared, ServiceAccountKey: v1alpha1.ServiceAccountKeyCompleted})
	if err == nil || !strings.HasPrefix(err.Error(), "cannot start a CA rotation: the rotation is in phase Prepared") {
		t.Errorf("rotate-credentials-start during a CA rotation: %v", err)
	}
	if err := Allowed(v1alpha1.VerbRotateCredentialsComplete, Phases{CA: v1alpha1.RotationPrepared, ServiceAccountKey: v1alpha1.ServiceAccountKeyPrepared}); err != nil {
		t.Errorf("rotate-credentials-complete with both Prepared: %v", err)
	}
	// A service-account key rotation does not hold the CA rotation back.
	if err := Allowed(v1alpha1.VerbStartCARotation, Phases{ServiceAccountKey: v1alpha1.ServiceAccountKeyPreparing}); err != nil {
		t.Errorf("start-ca-rotation during a service-account key rotation: %v", err)
	}
}

// FuzzDecideServiceAccountKey checks the invariants of the key rotation on
// any facts: a new key is generated only in Preparing from a Single key this
// rotation did not stage, the old public key is dropped only in Finalizing
// after the new key signs, and a phase ends only once the consumers rolled
// out.
func FuzzDecideServiceAccountKey(f *testing.F) {
	f.Add(uint8(1), uint8(0), false, true, uint8(0), uint8(60), uint8(1), uint8(30))
	phases := []v1alpha1.ServiceAccountKeyRotationPhase{"", v1alpha1.ServiceAccountKeyPreparing, v1alpha1.ServiceAccountKeyPrepared,
		v1alpha1.ServiceAccountKeyFinalizing, v1alpha1.ServiceAccountKeyCompleted}
	stages := []credentials.ServiceAccountKeyStage{credentials.ServiceAccountKeySingle, credentials.ServiceAccountKeyStaged, credentials.ServiceAccountKeySwitched}
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, phase, stage uint8, stagedHere, rolledOut bool, tokenSecrets uint8, refreshMinutes, signingMinutes, nowMinutes uint8) {
		facts := ServiceAccountKeyFacts{Phase: phases[int(phase)%len(phases)], Stage: stages[int(stage)%len(stages)],
			StagedInThisRotation: stagedHere, ConsumersRolledOut: rolledOut, TokenSecrets: fuzzEvidence[int(tokenSecrets)%len(fuzzEvidence)],
			WorkloadTokenRefresh: time.Duration(refreshMinutes) * time.Minute, Now: t0.Add(time.Duration(nowMinutes) * time.Minute)}
		if signingMinutes > 0 {
			facts.NewKeySigning = t0.Add(time.Duration(signingMinutes-1) * time.Minute)
		}
		d := DecideServiceAccountKey(facts)
		if d.Write == credentials.ServiceAccountKeyStaged &&
			(facts.Phase != v1alpha1.ServiceAccountKeyPreparing || facts.Stage != credentials.ServiceAccountKeySingle || facts.StagedInThisRotation) {
			t.Fatalf("a new key generated on %+v", facts)
		}
		if d.Write == credentials.ServiceAccountKeySingle && (facts.Phase != v1alpha1.ServiceAccountKeyFinalizing || facts.Stage != credentials.ServiceAccountKeySwitched) {
			t.Fatalf("the previous key dropped on %+v", facts)
		}
		if d.Write == credentials.ServiceAccountKeySwitched && facts.Stage != credentials.ServiceAccountKeyStaged {
			t.Fatalf("switched from %s on %+v", facts.Stage, facts)
		}
		if d.Phase != facts.Phase && (!facts.ConsumersRolledOut || d.Write != "") {
			t.Fatalf("phase %s → %s before the consumers rolled out the last write, on %+v", facts.Phase, d.Phase, facts)
		}
		if d.Phase == v1alpha1.ServiceAccountKeyPrepared && facts.Phase == v1alpha1.ServiceAccountKeyPreparing &&
			facts.NewKeySigning.IsZero() && !tokenSecretsDone(facts) {
			t.Fatalf("Prepared before the token Secrets were re-issued, on %+v", facts)
		}
		if d.Phase == v1alpha1.ServiceAccountKeyPrepared && facts.Phase == v1alpha1.ServiceAccountKeyPreparing && facts.WorkloadTokenRefresh > 0 &&
			(facts.NewKeySigning.IsZero() || facts.Now.Before(facts.NewKeySigning.Add(facts.WorkloadTokenRefresh))) {
			t.Fatalf("Prepared before pods had workloadTokenRefresh, on %+v", facts)
		}
		if d.Phase.RotationInProgress() && d.Reason == "" {
			t.Fatalf("phase %s without a reason on %+v", d.Phase, facts)
		}
	})
}
