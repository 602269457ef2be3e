// Package refused tells a write an API server refused (an admission webhook
// or policy, RBAC, an invalid or immutable object) from one it failed to
// serve (a timeout, an outage): the first waits for whoever refuses it and
// holds up nothing else; the second is the API server's, and a retry may
// succeed.
package refused

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Is reports whether err is the API server's refusal of a write.
func Is(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// Message is the API server's message of a refusal, or err's text.
func Message(err error) string {
	if status := apierrors.APIStatus(nil); errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}
