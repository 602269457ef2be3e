package auditwebhook

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// BenchmarkReceiveBatch measures one batch of 400 audit events (the API
// server's default --audit-webhook-batch-max-size) at the Metadata level the
// documented policy asks for, with the fields kube-apiserver fills in: half
// from kubelets and controllers with client certificates, half from pods
// with service-account tokens. Every managed API server sends one for each
// 400 requests it serves, so events/s is what one core of the manager can
// take from a fleet.
func BenchmarkReceiveBatch(b *testing.B) {
	events := make([]auditv1.Event, 400)
	for i := range events {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		e := auditv1.Event{
			Level: auditv1.LevelMetadata, AuditID: "0b9f8b1e-6a3c-4c55-9a43-5d2f1f6f0c2a", Stage: auditv1.StageResponseComplete,
			RequestURI: "/api/v1/namespaces/kube-system/configmaps/kube-root-ca.crt?resourceVersion=0", Verb: "get",
			SourceIPs: []string{"192.0.2.17"}, UserAgent: "kubelet/v1.36.3 (linux/amd64) kubernetes/4d63c2d",
			ObjectRef:                &auditv1.ObjectReference{Resource: "configmaps", Namespace: "kube-system", Name: "kube-root-ca.crt", APIVersion: "v1"},
			ResponseStatus:           &metav1.Status{Code: http.StatusOK},
			RequestReceivedTimestamp: metav1.NewMicroTime(at), StageTimestamp: metav1.NewMicroTime(at.Add(2 * time.Millisecond)),
			Annotations: map[string]string{"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""},
		}
		if i%2 == 0 {
			e.User = authnv1.UserInfo{Username: fmt.Sprintf("system:node:worker-%02d", i%20), Groups: []string{"system:nodes", "system:authenticated"},
				Extra: map[string]authnv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"X509SHA256=" + fp(fmt.Sprintf("%02x", i%20))}}}
		} else {
			e.User = authnv1.UserInfo{Username: "system:serviceaccount:kube-system:coredns", UID: "8d0b1c5e-2f3a-4b6c-9d7e-1f2a3b4c5d6e",
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
				Extra: map[string]authnv1.ExtraValue{
					"authentication.kubernetes.io/credential-id": {"JTI=5b7e1c2d-3f4a-4b5c-8d9e-0f1a2b3c4d5e"},
					"authentication.kubernetes.io/node-name":     {"worker-07"},
					"authentication.kubernetes.io/node-uid":      {"1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"},
					"authentication.kubernetes.io/pod-name":      {"coredns-7db6d8ff4d-x2x9k"},
					"authentication.kubernetes.io/pod-uid":       {"2d3e4f5a-6b7c-4d8e-9f0a-1b2c3d4e5f6a"},
				}}
		}
		events[i] = e
	}
	body := batch(events...)
	s := newSetup(b)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if w := s.post(body); w.Code != http.StatusOK {
			b.Fatalf("answered %d %s", w.Code, w.Body)
		}
	}
	b.ReportMetric(float64(len(events)*b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkBusyClusterMinute measures what a busy Cluster's sightings hold
// while they wait for their write: a minute of batches at kube-apiserver's
// default --audit-webhook-batch-throttle-qps (10 a second) of 400 events from
// 150 clients with client certificates (a cluster of some 70 nodes). Only
// the first batch writes; every later one only advances lastSeen.
// held-KiB is the heap the receiver holds at the end of the minute beyond
// what it held before the first batch (the record in the fake API server
// included).
func BenchmarkBusyClusterMinute(b *testing.B) {
	const clients, perBatch, batches = 150, 400, 600
	bodies := make([][]byte, batches)
	for n := range bodies {
		at := t0.Add(time.Duration(n) * 100 * time.Millisecond)
		events := make([]auditv1.Event, perBatch)
		for i := range events {
			events[i] = event(fmt.Sprintf("system:node:worker-%03d", i%clients), "X509SHA256="+fp(fmt.Sprintf("%03x", i%clients)), at)
		}
		bodies[n] = batch(events...)
	}
	var held int64
	for b.Loop() {
		s := newSetup(b)
		before := heapInUse()
		for _, body := range bodies {
			if w := s.post(body); w.Code != http.StatusOK {
				b.Fatalf("answered %d %s", w.Code, w.Body)
			}
		}
		held += int64(heapInUse()) - int64(before)
		runtime.KeepAlive(s)
	}
	b.ReportMetric(float64(held)/float64(b.N)/1024, "held-KiB")
}

// heapInUse is the live heap after two collections (the second empties
// what sync.Pools kept through the first).
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
