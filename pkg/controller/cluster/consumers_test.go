package cluster

import (
	"context"
	"crypto/x509"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
)

func TestReferences(t *testing.T) {
	spec := &corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "a", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s1"}}},
			{Name: "b", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c1"}}}},
			{Name: "c", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "s2"}}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "c2"}}},
			}}}},
		},
		InitContainers: []corev1.Container{{EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s3"}}}}}},
		Containers: []corev1.Container{{
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c3"}}}},
			Env: []corev1.EnvVar{
				{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s1"}}}},
				{Name: "Y", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "c4"}}}},
				{Name: "Z", Value: "plain"},
			},
		}},
	}
	secrets, configMaps := references(spec)
	if want := []string{"s1", "s2", "s3"}; !slices.Equal(secrets, want) {
		t.Errorf("secrets = %v, want %v", secrets, want)
	}
	if want := []string{"c1", "c2", "c3", "c4"}; !slices.Equal(configMaps, want) {
		t.Errorf("configMaps = %v, want %v", configMaps, want)
	}
}

func TestRolledOut(t *testing.T) {
	deployment := func(gen, observed int64, replicas, updated, available int32) appsv1.Deployment {
		return appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
			Status: appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated, AvailableReplicas: available}}
	}
	set := func(gen, observed int64, replicas, updated, ready int32, current, update string) appsv1.StatefulSet {
		return appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(replicas)},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: observed, UpdatedReplicas: updated, ReadyReplicas: ready, CurrentRevision: current, UpdateRevision: update}}
	}
	onDelete := func(s appsv1.StatefulSet) appsv1.StatefulSet {
		s.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
		return s
	}
	tests := []struct {
		name string
		objs objects
		want bool
	}{
		{"deployment done", objects{deployments: []appsv1.Deployment{deployment(2, 2, 3, 3, 3)}}, true},
		{"deployment not observed", objects{deployments: []appsv1.Deployment{deployment(3, 2, 3, 3, 3)}}, false},
		{"deployment half updated", objects{deployments: []appsv1.Deployment{deployment(2, 2, 3, 1, 3)}}, false},
		{"deployment unavailable", objects{deployments: []appsv1.Deployment{deployment(2, 2, 3, 3, 2)}}, false},
		{"statefulset done", objects{statefulSets: []appsv1.StatefulSet{set(4, 4, 3, 3, 3, "r2", "r2")}}, true},
		{"statefulset rolling", objects{statefulSets: []appsv1.StatefulSet{set(4, 4, 3, 1, 3, "r1", "r2")}}, false},
		{"statefulset not ready", objects{statefulSets: []appsv1.StatefulSet{set(4, 4, 3, 3, 2, "r2", "r2")}}, false},
		// OnDelete leaves currentRevision where it was: every Pod of the update revision is done.
		{"statefulset OnDelete, every Pod replaced", objects{statefulSets: []appsv1.StatefulSet{onDelete(set(4, 4, 3, 3, 3, "r1", "r2"))}}, true},
		{"statefulset OnDelete, Pods left to delete", objects{statefulSets: []appsv1.StatefulSet{onDelete(set(4, 4, 3, 1, 3, "r1", "r2"))}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := consumersOf(&tt.objs)
			if len(cs) != 1 || cs[0].rolledOut != tt.want {
				t.Fatalf("rolledOut = %v, want %v", cs[0].rolledOut, tt.want)
			}
		})
	}
}

func TestTrustEstablished(t *testing.T) {
	rolled := consumer{template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationTrustChecksum: "t1"}}}, rolledOut: true}
	rolling := rolled
	rolling.rolledOut = false
	older := consumer{template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationTrustChecksum: "t0"}}}, rolledOut: true}
	if !trustEstablished(nil, "t1") || !trustEstablished([]consumer{rolled}, "t1") {
		t.Fatal("no consumers, or all rolled out with the current bundles: trust is established")
	}
	if trustEstablished([]consumer{rolled, rolling}, "t1") || trustEstablished([]consumer{older}, "t1") {
		t.Fatal("a consumer still rolling, or on older bundles: trust is not established")
	}
}

// Once the clients moved to the new client CA (Carousel's own certificate
// first), a client re-issued is on the new CA whatever the consumers'
// rollouts show now: a replica down, or the worker pools rolling in
// Preparing after rotate-rollout-workers.
func TestTrustIsSettledOnceTheClientsMoved(t *testing.T) {
	now := time.Now()
	ca := func(name string) *pki.KeyPair {
		key, err := pki.GenerateKey(pki.ECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		kp, err := pki.NewCA(pki.CATemplate{CommonName: name, Validity: time.Hour}, key, now)
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	oldCA, newCA := ca("client CA0"), ca("client CA1")
	rolling := consumer{template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationTrustChecksum: "t1"}}}}
	for _, tt := range []struct {
		name   string
		phase  v1alpha1.CARotationPhase
		secret string // the certificate's Secret; none when empty
		signer *pki.KeyPair
		want   bool
	}{
		{"Carousel's certificate on the old client CA", v1alpha1.RotationPreparing, credentials.CertOperator, oldCA, false},
		{"Carousel's certificate on the new client CA", v1alpha1.RotationPreparing, credentials.CertOperator, newCA, true},
		{"Carousel's certificate lost, the scheduler's on the new client CA", v1alpha1.RotationPreparing, credentials.CertKubeScheduler, newCA, true},
		{"Carousel's certificate lost, the scheduler's on the old client CA", v1alpha1.RotationPreparing, credentials.CertKubeScheduler, oldCA, false},
		{"a server certificate is not a client's", v1alpha1.RotationPreparing, credentials.CertKubeAPIServer, newCA, false},
		{"Prepared, every client certificate lost", v1alpha1.RotationPrepared, "", nil, true},
		{"waiting for the held pools, every client certificate lost", v1alpha1.RotationWaitingForWorkersRollout, "", nil, true},
	} {
		c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "fleet"}}
		c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{
			CertificateAuthorities: &v1alpha1.CARotation{Phase: tt.phase}}}
		objs := &objects{secrets: map[string]*corev1.Secret{}}
		if tt.secret != "" {
			leaf, err := tt.signer.IssueKeyPair(pki.LeafTemplate{CommonName: "carousel", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
				Validity: time.Hour}, pki.ECDSAP256, now)
			if err != nil {
				t.Fatal(err)
			}
			objs.secrets[credentials.CertificateSecretName(c.Name, tt.secret)] = &corev1.Secret{Data: map[string][]byte{v1alpha1.DataKeyCertificate: leaf.CertPEM()}}
		}
		s := &scope{cluster: c, consumers: []consumer{rolling}, trustSum: "t1",
			cas:  map[v1alpha1.CARole]*credentials.CAs{v1alpha1.CARoleClient: {Current: newCA, Previous: oldCA}},
			objs: objs}
		if err := (&Reconciler{}).trustPhase(context.Background(), s); err != nil || s.trusted != tt.want {
			t.Errorf("%s, a consumer rolling: trusted %v (%v), want %v", tt.name, s.trusted, err, tt.want)
		}
	}
}
