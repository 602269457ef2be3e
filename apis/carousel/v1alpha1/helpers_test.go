package v1alpha1

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTokenTTLOrDefault(t *testing.T) {
	tests := []struct {
		name string
		ttl  *metav1.Duration
		want time.Duration
	}{
		{"unset", nil, DefaultBootstrapTokenTTL},
		{"within the bounds", &metav1.Duration{Duration: time.Hour}, time.Hour},
		{"the shortest", &metav1.Duration{Duration: MinBootstrapTokenTTL}, MinBootstrapTokenTTL},
		{"the longest", &metav1.Duration{Duration: MaxBootstrapTokenTTL}, MaxBootstrapTokenTTL},
		{"zero, past the webhook", &metav1.Duration{}, MinBootstrapTokenTTL},
		{"negative, past the webhook", &metav1.Duration{Duration: -time.Hour}, MinBootstrapTokenTTL},
		{"a second, past the webhook", &metav1.Duration{Duration: time.Second}, MinBootstrapTokenTTL},
		{"years, past the webhook", &metav1.Duration{Duration: 2_000_000 * time.Hour}, MaxBootstrapTokenTTL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kb := KubeletBootstrapSpec{TokenTTL: tt.ttl}
			if got := kb.TokenTTLOrDefault(); got != tt.want {
				t.Errorf("TokenTTLOrDefault() = %v, want %v", got, tt.want)
			}
		})
	}
}
