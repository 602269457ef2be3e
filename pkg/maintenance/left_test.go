package maintenance

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

func TestLeft(t *testing.T) {
	const (
		start, complete, abort                = "start-ca-rotation", "complete-ca-rotation", "abort-ca-rotation"
		keyStart, keyComplete                 = "rotate-serviceaccount-key-start", "rotate-serviceaccount-key-complete"
		credentialsStart, credentialsComplete = "rotate-credentials-start", "rotate-credentials-complete"
	)
	for _, tt := range []struct {
		applied, queued string
		dropped         bool
		rest            string
	}{
		{abort, complete, true, ""},
		{abort, complete + "=force", true, ""},
		{abort + "=force", credentialsComplete, true, keyComplete},
		{abort, keyComplete, false, keyComplete},
		{abort, start, false, start}, // a start queued for after the abort is still wanted
		{complete, complete, true, ""},
		{complete + "=force", credentialsComplete + "=force", true, keyComplete},
		{credentialsComplete, credentialsComplete, true, ""},
		{credentialsComplete, keyComplete, true, ""},
		{credentialsComplete, complete, true, ""},
		{keyComplete, credentialsComplete + "=force", true, complete}, // queued before a forced operation could not be
		{keyComplete, complete, false, complete},
		{start, start, true, ""},
		{"start-ca-rotation-without-workers-rollout", start, true, ""},
		{start, credentialsStart, true, keyStart},
		{credentialsStart, start, true, ""},
		{keyStart, credentialsStart, true, start},
		{start, complete, false, complete}, // queued in Completed for the rotation starting now
		{complete, start, false, start},
		{abort, credentialsStart, false, credentialsStart},
		{keyStart, keyStart, true, ""},
		{keyComplete, keyComplete, true, ""},
		{keyStart, complete, false, complete},
		{"rotate-rollout-workers=a", complete, false, complete},
		{"reissue-service-account-key", keyStart, false, keyStart},
		{"reissue-ca=etcd", start, false, start},
		{"reconcile", complete, false, complete},
		{"rollout-workers=a", complete, false, complete},
		{complete, "not-an-operation", false, "not-an-operation"},
	} {
		applied, err := v1alpha1.ParseOperation(tt.applied)
		if err != nil {
			t.Fatal(err)
		}
		if dropped, rest := Left(applied, tt.queued); dropped != tt.dropped || rest != tt.rest {
			t.Errorf("Left(%s, %s) = %v, %q; want %v, %q", tt.applied, tt.queued, dropped, rest, tt.dropped, tt.rest)
		}
	}
}

// FuzzLeft checks Left on any pair of operation values: what it leaves is
// the queued value itself or one of its parts, queueable when the queued
// value was, nothing when every part went; a part goes exactly when the
// operation did the same (a start, a completion or an abort of the CA
// rotation, the same step of the key rotation); what it leaves is never
// forced; and what it leaves, the same operation takes nothing more from.
func FuzzLeft(f *testing.F) {
	f.Add("abort-ca-rotation", "rotate-credentials-complete=force")
	f.Add("rotate-serviceaccount-key-start", "rotate-credentials-start")
	f.Add("complete-ca-rotation=force", "complete-ca-rotation")
	f.Add("reconcile", "start-ca-rotation")
	f.Add("start-ca-rotation-without-workers-rollout", "rotate-credentials-start")
	f.Add("rotate-credentials-complete", "rotate-serviceaccount-key-complete")
	f.Add("abort-ca-rotation=force", "start-ca-rotation")
	f.Add("rollout-workers=a", "complete-ca-rotation=force")
	f.Fuzz(func(t *testing.T, applied, queued string) {
		op, err := v1alpha1.ParseOperation(applied)
		if err != nil {
			return // never applied
		}
		dropped, rest := Left(op, queued)
		was, parseErr := v1alpha1.ParseOperation(queued)
		if parseErr == nil {
			var left v1alpha1.Operation
			if rest != "" {
				left, _ = v1alpha1.ParseOperation(rest)
			}
			done, qca := op.Verb.CAVerb(), was.Verb.CAVerb()
			wantCA := qca != "" && (isStart(qca) && isStart(done) ||
				qca == v1alpha1.VerbCompleteCARotation && (done == v1alpha1.VerbCompleteCARotation || done == v1alpha1.VerbAbortCARotation))
			wantKey := was.Verb.ServiceAccountKeyVerb() != "" && was.Verb.ServiceAccountKeyVerb() == op.Verb.ServiceAccountKeyVerb()
			if gotCA := qca != "" && left.Verb.CAVerb() == ""; gotCA != wantCA {
				t.Fatalf("Left(%s, %s) = %q: CA part dropped %v, want %v", applied, queued, rest, gotCA, wantCA)
			}
			if gotKey := was.Verb.ServiceAccountKeyVerb() != "" && left.Verb.ServiceAccountKeyVerb() == ""; gotKey != wantKey {
				t.Fatalf("Left(%s, %s) = %q: key part dropped %v, want %v", applied, queued, rest, gotKey, wantKey)
			}
		}
		if !dropped {
			if rest != queued {
				t.Fatalf("Left(%s, %s) dropped nothing but left %q", applied, queued, rest)
			}
			return
		}
		if parseErr != nil {
			t.Fatalf("Left(%s, %q) dropped from a value that does not parse", applied, queued)
		}
		if rest == "" {
			return
		}
		left, err := v1alpha1.ParseOperation(rest)
		if err != nil {
			t.Fatalf("Left(%s, %s) left %q, which does not parse: %v", applied, queued, rest, err)
		}
		if left.Force {
			t.Fatalf("Left(%s, %s) left %q, forced, which the webhook refuses to queue", applied, queued, rest)
		}
		if _, qerr := Queueable(queued); qerr == nil {
			if _, err := Queueable(rest); err != nil {
				t.Fatalf("Left(%s, %s) left %q, which is not queueable: %v", applied, queued, rest, err)
			}
		}
		if ca := left.Verb.CAVerb(); ca != "" && ca != was.Verb.CAVerb() || left.Verb.ServiceAccountKeyVerb() != "" && left.Verb.ServiceAccountKeyVerb() != was.Verb.ServiceAccountKeyVerb() ||
			left.Verb == was.Verb {
			t.Fatalf("Left(%s, %s) left %q, which is not a part of it", applied, queued, rest)
		}
		if again, _ := Left(op, rest); again {
			t.Fatalf("Left(%s, %s) left %q, from which it takes more", applied, queued, rest)
		}
		// The Cluster controller writes what is left, window or not: the
		// webhook must admit it.
		noWindow := func(value string) *v1alpha1.Cluster {
			return &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Annotations: map[string]string{v1alpha1.MaintenanceOperationAnnotation: value}}}
		}
		if errs := ValidateUpdate(noWindow(rest), noWindow(queued)); len(errs) > 0 {
			t.Fatalf("Left(%s, %s) left %q, which the webhook refuses without a window: %v", applied, queued, rest, errs.ToAggregate())
		}
	})
}
