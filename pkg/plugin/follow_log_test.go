package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// A follow that reached its target stops its watch in the middle of a read:
// client-go's reflector may take that for a watch that ended with an error
// and log a warning, which --wait printed after its last line (an e2e run
// caught it). The follow's informer logs nowhere: here a first watch ends
// with an error, which the reflector always logs, and the follow goes on.
func TestAFollowThatEndsLogsNothing(t *testing.T) {
	cluster := func(rv string, phase v1alpha1.CARotationPhase) v1alpha1.Cluster {
		return v1alpha1.Cluster{TypeMeta: metav1.TypeMeta{Kind: "Cluster", APIVersion: v1alpha1.SchemeGroupVersion.String()},
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod", ResourceVersion: rv},
			Status: v1alpha1.ClusterStatus{Credentials: &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{
				CertificateAuthorities: &v1alpha1.CARotation{Phase: phase}}}}}
	}
	var watches atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case q.Get("watch") == "true" && q.Has("sendInitialEvents"):
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Reason: metav1.StatusReasonBadRequest, Code: http.StatusBadRequest, Message: "sendInitialEvents is not served"})
		case q.Get("watch") == "true" && watches.Add(1)%2 == 1:
			w.WriteHeader(http.StatusOK)
			broken, _ := json.Marshal(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Reason: metav1.StatusReasonBadRequest, Code: http.StatusBadRequest, Message: "the stream broke"})
			_ = json.NewEncoder(w).Encode(metav1.WatchEvent{Type: string(watch.Error), Object: runtime.RawExtension{Raw: broken}})
		case q.Get("watch") == "true":
			w.WriteHeader(http.StatusOK)
			prepared, _ := json.Marshal(cluster("2", v1alpha1.RotationPrepared))
			_ = json.NewEncoder(w).Encode(metav1.WatchEvent{Type: string(watch.Modified), Object: runtime.RawExtension{Raw: prepared}})
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			_ = json.NewEncoder(w).Encode(v1alpha1.ClusterList{TypeMeta: metav1.TypeMeta{Kind: "ClusterList", APIVersion: v1alpha1.SchemeGroupVersion.String()},
				ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []v1alpha1.Cluster{cluster("1", v1alpha1.RotationPreparing)}})
		}
	}))
	defer api.Close()
	defer api.CloseClientConnections()

	var logged bytes.Buffer
	klog.LogToStderr(false)
	klog.SetOutput(&logged)
	defer func() {
		klog.SetOutput(nil)
		klog.LogToStderr(true)
	}()
	flags := genericclioptions.NewConfigFlags(false)
	flags.APIServer = &api.URL
	for i := range 3 {
		out := &bytes.Buffer{}
		e := &env{flags: flags, streams: genericiooptions.IOStreams{Out: out, ErrOut: &bytes.Buffer{}}}
		target := followTarget{ca: []v1alpha1.CARotationPhase{v1alpha1.RotationPrepared}}
		if err := e.follow(context.Background(), "team-a", "prod", target, 10*time.Second, nil); err != nil {
			t.Fatalf("follow %d: %v", i, err)
		}
		klog.Flush()
		if !strings.HasSuffix(out.String(), "phase Prepared\n") || logged.Len() > 0 {
			t.Fatalf("follow %d printed %q and logged %q; want it to end at Prepared, logging nothing", i, out.String(), logged.String())
		}
	}
}
