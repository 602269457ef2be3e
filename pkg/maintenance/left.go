package maintenance

import (
	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// Left is what remains of value, queued for the maintenance window, once
// op was carried out by hand. Each part of value (what it asks of the CA
// rotation, and of the service-account key rotation) that op did too, or
// made moot, is dropped: an abort ends the CA rotation a queued completion
// was for. Kept, such a part would wait until a phase allows it again, and
// then start or complete the next rotation, which nobody asked for.
// Dropped reports whether a part went; rest is what is left to queue,
// empty when nothing is, and never forced.
func Left(op v1alpha1.Operation, value string) (dropped bool, rest string) {
	queued, err := v1alpha1.ParseOperation(value)
	if err != nil {
		return false, value // the webhook refuses it; the condition says so
	}
	ca, key := queued.Verb.CAVerb(), queued.Verb.ServiceAccountKeyVerb()
	if done := op.Verb.CAVerb(); ca != "" && (isStart(ca) && isStart(done) ||
		ca == v1alpha1.VerbCompleteCARotation && (done == v1alpha1.VerbCompleteCARotation || done == v1alpha1.VerbAbortCARotation)) {
		ca, dropped = "", true
	}
	if key != "" && key == op.Verb.ServiceAccountKeyVerb() {
		key, dropped = "", true
	}
	switch {
	case !dropped:
		return false, value
	case ca != "":
		// The part of a rotate-credentials verb op did not do, without a
		// force: a forced operation is no longer queued (Queueable), and the
		// webhook would refuse the write that kept one queued before that
		// rule.
		return true, string(ca)
	}
	return true, string(key)
}

func isStart(v v1alpha1.OperationVerb) bool {
	return v == v1alpha1.VerbStartCARotation || v == v1alpha1.VerbStartCARotationWithoutWorkersRollout
}
