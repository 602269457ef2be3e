package cluster

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// A certificate issued and stored is announced even when a later one's write
// fails: the next pass does not issue it again, and would not announce it.
func TestACertificateStoredIsAnnouncedWhenALaterWriteFails(t *testing.T) {
	ctx := context.Background()
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "events", Namespace: "default", UID: "events-uid"},
		Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"}}
	var stored []string
	api := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if obj.GetLabels()[v1alpha1.LabelCertificate] != "" {
				if len(stored) == 1 {
					return apierrors.NewConflict(corev1.Resource("secrets"), obj.GetName(), nil)
				}
				stored = append(stored, obj.GetLabels()[v1alpha1.LabelCertificate])
			}
			return cl.Create(ctx, obj, opts...)
		}}).Build()
	recorder := events.NewFakeRecorder(100)
	r := &Reconciler{Client: api, Clock: clock.RealClock{}, Recorder: recorder}
	objs := &objects{secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}}
	all, err := r.ensureCAs(ctx, c, objs)
	if err != nil {
		t.Fatal(err)
	}
	for len(recorder.Events) > 0 {
		<-recorder.Events // the CAs'
	}
	trust, err := r.ensureBundles(ctx, c, objs, all)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ensureCertificates(ctx, c, objs, all, trust, false); !apierrors.IsConflict(err) {
		t.Fatalf("ensureCertificates = %v, want the second certificate's conflict", err)
	}
	var announced []string
	for len(recorder.Events) > 0 {
		announced = append(announced, <-recorder.Events)
	}
	if len(stored) != 1 || len(announced) != 1 || !strings.Contains(announced[0], v1alpha1.EventCertificateIssued+" ") ||
		!strings.HasSuffix(announced[0], "Issued "+stored[0]) {
		t.Errorf("stored %v, events %q; want one %s event naming the certificate stored", stored, announced, v1alpha1.EventCertificateIssued)
	}
}
