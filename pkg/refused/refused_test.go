package refused

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestIs(t *testing.T) {
	secrets := schema.GroupResource{Resource: "secrets"}
	for _, tt := range []struct {
		name    string
		err     error
		refused bool
		message string
	}{
		{"an admission webhook's denial", apierrors.NewForbidden(secrets, "a", errors.New(`admission webhook "x" denied the request`)), true,
			`secrets "a" is forbidden: admission webhook "x" denied the request`},
		{"an immutable object", apierrors.NewInvalid(schema.GroupKind{Kind: "Secret"}, "a", nil), true, `Secret "a" is invalid`},
		{"a bad request", apierrors.NewBadRequest("no"), true, "no"},
		{"wrapped", fmt.Errorf("writing: %w", apierrors.NewBadRequest("no")), true, "no"},
		{"an outage", apierrors.NewServiceUnavailable("etcd is down"), false, "etcd is down"},
		{"a timeout", apierrors.NewTimeoutError("slow", 1), false, "Timeout: slow"},
		{"a conflict", apierrors.NewConflict(secrets, "a", errors.New("changed")), false, `Operation cannot be fulfilled on secrets "a": changed`},
		{"no API status", errors.New("connection refused"), false, "connection refused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Is(tt.err); got != tt.refused {
				t.Errorf("Is = %v, want %v", got, tt.refused)
			}
			if got := Message(tt.err); got != tt.message {
				t.Errorf("Message = %q, want %q", got, tt.message)
			}
		})
	}
}
