package framework

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

// Workload names of the managed control plane in the Cluster's namespace.
const (
	EtcdWorkload      = "etcd"
	APIServerWorkload = "kube-apiserver"
)

// Platform plays the hosting platform for a managed control plane: the
// workloads Carousel rolls are a StatefulSet (etcd) and a Deployment
// (kube-apiserver) in the management cluster that mount the Cluster's
// credentials; when Carousel rolls one, the platform writes the credentials
// as files, restarts the real process, and reports the rollout complete in
// the workload's status.
type Platform struct {
	Client       client.Client
	Cluster      *v1alpha1.Cluster
	ControlPlane *ManagedControlPlane
	// Restarts counts the API-server restarts, the planned interruptions.
	Restarts int
	// Logf, when set, reports each rollout carried out.
	Logf func(format string, args ...any)
}

// CreateWorkloads creates the two workloads, reported as rolled out.
func (p *Platform) CreateWorkloads(ctx context.Context) error {
	for _, w := range []struct {
		name   string
		set    bool
		filter func(credentialFile) bool
	}{
		{name: EtcdWorkload, set: true, filter: func(f credentialFile) bool { return f.file[:4] == "etcd" }},
		{name: APIServerWorkload, filter: func(f credentialFile) bool { return f.file[:4] != "etcd" || f.file == "etcd-ca.crt" }},
	} {
		spec := p.podTemplate(w.name, w.filter)
		labels := map[string]string{v1alpha1.LabelCluster: p.Cluster.Name}
		selector := &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}}
		var obj client.Object
		if w.set {
			obj = &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: p.Cluster.Namespace, Name: w.name, Labels: labels},
				Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: selector, Template: spec}}
		} else {
			obj = &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: p.Cluster.Namespace, Name: w.name, Labels: labels},
				Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: selector, Template: spec}}
		}
		if err := p.Client.Create(ctx, obj); err != nil {
			return err
		}
	}
	_, err := p.reportRolledOut(ctx, true)
	return err
}

// ignoreConflict drops a conflict: Carousel changed the workload meanwhile,
// and the next Sync rolls it again.
func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func (p *Platform) podTemplate(name string, keep func(credentialFile) bool) corev1.PodTemplateSpec {
	t := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: name}}},
	}
	seen := map[string]bool{}
	for _, f := range credentialFiles(p.Cluster.Name) {
		if !keep(f) {
			continue
		}
		var v corev1.Volume
		if f.bundle != "" {
			cm := credentials.BundleConfigMapName(p.Cluster.Name, f.bundle)
			v = corev1.Volume{Name: cm, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}
		} else {
			v = corev1.Volume{Name: f.secret, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: f.secret}}}
		}
		if !seen[v.Name] {
			seen[v.Name] = true
			t.Spec.Volumes = append(t.Spec.Volumes, v)
		}
	}
	return t
}

// Settled reports whether both workloads run the template Carousel last
// stamped with the credentials' checksum.
func (p *Platform) Settled(ctx context.Context) (bool, error) {
	set := &appsv1.StatefulSet{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: p.Cluster.Namespace, Name: EtcdWorkload}, set); err != nil {
		return false, err
	}
	deploy := &appsv1.Deployment{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: p.Cluster.Namespace, Name: APIServerWorkload}, deploy); err != nil {
		return false, err
	}
	stamped := func(t corev1.PodTemplateSpec) bool { return t.Annotations["carousel.dev/credentials-checksum"] != "" }
	return stamped(set.Spec.Template) && stamped(deploy.Spec.Template) &&
		set.Status.ObservedGeneration == set.Generation && deploy.Status.ObservedGeneration == deploy.Generation, nil
}

// Sync carries out the rollouts Carousel asked for since the last call. It
// returns whether it restarted anything.
func (p *Platform) Sync(ctx context.Context) (bool, error) {
	return p.reportRolledOut(ctx, false)
}

// Run calls Sync every interval until ctx ends; errors are retried.
func (p *Platform) Run(ctx context.Context, interval time.Duration) {
	for {
		_, _ = p.Sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

func (p *Platform) reportRolledOut(ctx context.Context, initial bool) (bool, error) {
	set := &appsv1.StatefulSet{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: p.Cluster.Namespace, Name: EtcdWorkload}, set); err != nil {
		return false, err
	}
	deploy := &appsv1.Deployment{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: p.Cluster.Namespace, Name: APIServerWorkload}, deploy); err != nil {
		return false, err
	}
	etcdDue := set.Status.ObservedGeneration != set.Generation
	apiDue := deploy.Status.ObservedGeneration != deploy.Generation
	if (etcdDue || apiDue) && p.Logf != nil {
		p.Logf("platform: etcd %d/%d %s, kube-apiserver %d/%d %s", set.Status.ObservedGeneration, set.Generation,
			set.Spec.Template.Annotations, deploy.Status.ObservedGeneration, deploy.Generation, deploy.Spec.Template.Annotations)
	}
	if !etcdDue && !apiDue {
		return false, nil
	}
	if !initial {
		if p.Logf != nil {
			p.Logf("platform: rolling etcd=%v (generation %d) kube-apiserver=%v (generation %d)", etcdDue, set.Generation, apiDue, deploy.Generation)
		}
		if err := p.ControlPlane.WriteCredentials(ctx, p.Client, p.Cluster); err != nil {
			return false, err
		}
		if etcdDue {
			stop(p.ControlPlane.etcd)
			if err := p.ControlPlane.StartEtcd(); err != nil {
				return false, err
			}
		}
		if etcdDue || apiDue {
			p.Restarts++
			if err := p.ControlPlane.RestartAPIServer(ctx); err != nil {
				return false, fmt.Errorf("restarting kube-apiserver: %w", err)
			}
		}
	}
	if etcdDue {
		set.Status = appsv1.StatefulSetStatus{ObservedGeneration: set.Generation, Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1,
			CurrentReplicas: 1, AvailableReplicas: 1, CurrentRevision: fmt.Sprint(set.Generation), UpdateRevision: fmt.Sprint(set.Generation)}
		if err := p.Client.Status().Update(ctx, set); err != nil {
			return false, client.IgnoreNotFound(ignoreConflict(err))
		}
	}
	if apiDue {
		deploy.Status = appsv1.DeploymentStatus{ObservedGeneration: deploy.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
		if err := p.Client.Status().Update(ctx, deploy); err != nil {
			return false, client.IgnoreNotFound(ignoreConflict(err))
		}
	}
	return true, nil
}
