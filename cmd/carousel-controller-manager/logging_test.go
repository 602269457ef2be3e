package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// encodings counts how often a logged value is encoded.
type encodings struct{ n int }

func (e *encodings) MarshalLogObject(enc zapcore.ObjectEncoder) error { //nolint:unparam // zapcore.ObjectMarshaler
	e.n++
	enc.AddString("name", "c-0001")
	return nil
}

// TestLoggersEncodeFieldsOnlyWhenTheyWrite: a reconcile's logger, derived
// twice as controller-runtime derives it, encodes its values only for a
// line it writes, and that line carries all of them.
func TestLoggersEncodeFieldsOnlyWhenTheyWrite(t *testing.T) {
	var out bytes.Buffer
	log := newLogger(&zap.Options{}, zap.WriteTo(&out))
	cluster := &encodings{}
	reconcile := log.WithValues("Cluster", cluster).WithValues("reconcileID", "r-1")
	reconcile.V(1).Info("cache behind the API server; retrying")
	if cluster.n != 0 || out.Len() != 0 {
		t.Fatalf("a line below the level: the Cluster encoded %d times, %q written; want neither", cluster.n, out.String())
	}
	reconcile.Info("reconciled")
	if cluster.n != 1 {
		t.Fatalf("the Cluster encoded %d times for one line, want once", cluster.n)
	}
	for _, want := range []string{`"msg":"reconciled"`, `"name":"c-0001"`, `"reconcileID":"r-1"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the line %q lacks %s", out.String(), want)
		}
	}
}
