package v1alpha1

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// FuzzParseOperation feeds arbitrary annotation values to ParseOperation. It
// must never panic; a refused value yields the zero Operation; an accepted
// one has a known verb, formats back to exactly the value it was parsed from
// (so the value Carousel reports is the one the user wrote), parses again to
// the same Operation, and carries only the list its verb takes: worker pools
// that are non-empty, comma-free and distinct, or distinct known CA roles.
func FuzzParseOperation(f *testing.F) {
	for _, seed := range []string{
		OperationStartCARotation,
		OperationCompleteCARotation, OperationAbortCARotation,
		OperationReconcile,
		"rollout-workers=pool-a",
		"rollout-workers=pool-a,pool-b,gpu",
		"rollout-workers=",
		"rollout-workers=pool-a,,pool-b",
		"rollout-workers=pool-a,pool-a",
		"rollout-workers=pool-a,",
		"rollout-workers",
		"reissue-ca=etcd",
		"reissue-service-account-key",
		"reissue-ca=cluster,front-proxy,metrics-server",
		"reissue-ca=etcd,etcd",
		"reissue-ca=root",
		"reissue-ca=",
		"Start-CA-Rotation",
		" start-ca-rotation",
		"start-ca-rotation\n",
		"",
		"rollout-workers=rollout-workers=a",
		"reissue-ca=etcd,rollout-workers=a",
		OperationStartCARotationWithoutWorkersRollout,
		"rotate-rollout-workers=pool-a,gpu",
		"rotate-rollout-workers=",
		"rotate-rollout-workers",
		"rotate-rollout-workers=rollout-workers=a",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		op, err := ParseOperation(value)
		if err != nil {
			if !reflect.DeepEqual(op, Operation{}) {
				t.Fatalf("ParseOperation(%q) refused the value (%v) but returned %+v", value, err, op)
			}
			if err.Error() == "" {
				t.Fatalf("ParseOperation(%q): empty error message", value)
			}
			return
		}
		if got := op.String(); got != value {
			t.Fatalf("ParseOperation(%q).String() = %q", value, got)
		}
		again, err := ParseOperation(op.String())
		if err != nil || !reflect.DeepEqual(again, op) {
			t.Fatalf("ParseOperation(%q) = %+v, but parsing its String() gives %+v, %v", value, op, again, err)
		}
		switch op.Verb {
		case VerbStartCARotation, VerbStartCARotationWithoutWorkersRollout, VerbCompleteCARotation, VerbAbortCARotation, VerbReconcile, VerbReissueServiceAccountKey:
			if op.Pools != nil || op.Roles != nil {
				t.Fatalf("ParseOperation(%q): verb %s takes no list, got pools %q, roles %q", value, op.Verb, op.Pools, op.Roles)
			}
		case VerbRolloutWorkers, VerbRotateRolloutWorkers:
			if op.Roles != nil {
				t.Fatalf("ParseOperation(%q): %s with roles %q", value, op.Verb, op.Roles)
			}
			if len(op.Pools) == 0 {
				t.Fatalf("ParseOperation(%q): %s without a pool", value, op.Verb)
			}
			for i, pool := range op.Pools {
				if pool == "" || strings.Contains(pool, ",") {
					t.Fatalf("ParseOperation(%q): pool %q is not a name", value, pool)
				}
				if slices.Contains(op.Pools[:i], pool) {
					t.Fatalf("ParseOperation(%q): pool %q named twice", value, pool)
				}
			}
		case VerbReissueCA:
			if op.Pools != nil {
				t.Fatalf("ParseOperation(%q): reissue-ca with pools %q", value, op.Pools)
			}
			if len(op.Roles) == 0 {
				t.Fatalf("ParseOperation(%q): reissue-ca without a role", value)
			}
			for i, role := range op.Roles {
				if !slices.Contains(CARoles(), role) {
					t.Fatalf("ParseOperation(%q): %q is not a CA role", value, role)
				}
				if slices.Contains(op.Roles[:i], role) {
					t.Fatalf("ParseOperation(%q): role %q named twice", value, role)
				}
			}
		default:
			t.Fatalf("ParseOperation(%q) accepted unknown verb %q", value, op.Verb)
		}
	})
}
