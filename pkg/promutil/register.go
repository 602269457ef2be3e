// Package promutil holds Prometheus helpers shared by Carousel's controllers.
package promutil

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg, or returns the collector registered before
// under the same name, so that a manager restarted in one process (tests,
// the local environment) keeps counting in the same series.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			return already.ExistingCollector.(C)
		}
		panic(err)
	}
	return c
}
