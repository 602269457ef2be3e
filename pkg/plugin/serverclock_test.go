package plugin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// A workstation whose clock is hours ahead of the cluster's judges uploads
// by the API server's clock, which its answers tell: it deletes the uploads
// expired there, and not another user's that are live there.
func TestUploadsExpireByTheAPIServersClock(t *testing.T) {
	local := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 15, 0, 0, 0, time.UTC))
	serverTime := local.Now().Add(-3 * time.Hour)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Date", serverTime.Format(http.TimeFormat))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
	}))
	defer api.Close()
	e := &env{clock: local, server: &serverClock{local: local}}
	if got := e.serverNow(); !got.Equal(local.Now()) {
		t.Errorf("before an answer, the server's time is %s, want the local %s", got, local.Now())
	}
	cfg := &rest.Config{Host: api.URL}
	e.server.watch(cfg)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Get(api.URL + "/version")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	local.Step(time.Minute)
	if got, want := e.serverNow(), serverTime.Add(time.Minute); !got.Equal(want) {
		t.Errorf("a minute after its answer, the server's time is %s, want %s", got, want)
	}

	liveThere := uploadToken("live01", local.Now().Add(-time.Hour).Format(time.RFC3339))
	expiredThere := uploadToken("exp001", local.Now().Add(-4*time.Hour).Format(time.RFC3339))
	var objs []client.Object
	for _, s := range []corev1.Secret{liveThere, uploadCopy("live01", &liveThere), expiredThere, uploadCopy("exp001", &expiredThere)} {
		s.Namespace, s.Labels = metav1.NamespaceSystem, map[string]string{v1alpha1.LabelCertsUpload: "prod"}
		objs = append(objs, &s)
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build()
	if err := e.deleteExpiredUploads(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	for name, wantKept := range map[string]bool{
		"bootstrap-token-live01": true, certsSecretPrefix + "live01": true,
		"bootstrap-token-exp001": false, certsSecretPrefix + "exp001": false,
	} {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: name}, &corev1.Secret{})
		if kept := err == nil; kept != wantKept || err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("%s: kept %v (%v), want %v", name, kept, err, wantKept)
		}
	}
}
