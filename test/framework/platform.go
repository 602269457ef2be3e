package framework

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// Workload names of the managed control plane in the Cluster's namespace.
const (
	EtcdWorkload              = "etcd"
	APIServerWorkload         = "kube-apiserver"
	ControllerManagerWorkload = "kube-controller-manager"
	SchedulerWorkload         = "kube-scheduler"
)

// Window is a stretch of time in which something restarted.
type Window struct{ Start, End time.Time }

// Contains reports whether t falls in the window, widened by grace on both sides.
func (w Window) Contains(t time.Time, grace time.Duration) bool {
	return !t.Before(w.Start.Add(-grace)) && !t.After(w.End.Add(grace))
}

// Overlaps reports whether o shares a moment with the window widened by
// grace on both sides.
func (w Window) Overlaps(o Window, grace time.Duration) bool {
	return !o.End.Before(w.Start.Add(-grace)) && !o.Start.After(w.End.Add(grace))
}

// Platform plays the hosting platform for a managed control plane: the
// workloads Carousel rolls are a StatefulSet (etcd) and Deployments
// (kube-apiserver and, when the control plane runs them, kube-controller-manager,
// kube-scheduler and metrics-server)
// in the management cluster that mount the Cluster's credentials. When
// Carousel rolls one, the platform writes the credentials as files, restarts
// the real process, and reports the rollout complete in the workload's status.
type Platform struct {
	Client       client.Client
	Cluster      *v1alpha1.Cluster
	ControlPlane *ManagedControlPlane
	// Logf, when set, reports each rollout carried out.
	Logf func(format string, args ...any)

	mu       sync.Mutex
	rollouts []Window
	exit     *ExitError // of a process the last Sync restarted
}

// Rollouts returns the windows in which the platform rolled workloads.
func (p *Platform) Rollouts() []Window {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Window(nil), p.rollouts...)
}

type workload struct {
	name        string
	statefulSet bool
	replicas    int32
	// mounts selects the credential files the workload's pod mounts.
	mounts  func(credentialFile) bool
	restart func(context.Context) error
	// crashed, when set, reports whether the workload's process exited by
	// itself; Sync then restarts it, as the kubelet restarts a container
	// that exited (restartPolicy Always).
	crashed func() bool
}

// filesOf selects the credential files whose names start with prefix.
func filesOf(prefix string) func(credentialFile) bool {
	return func(f credentialFile) bool { return strings.HasPrefix(f.file, prefix) }
}

// apiServerFiles selects the API server's credential files: those of no
// other component, and the etcd CA.
func apiServerFiles(f credentialFile) bool {
	for _, other := range []string{"etcd", "kcm", "scheduler", "metrics-server", "konnectivity-agent"} {
		if filesOf(other)(f) {
			return f.file == "etcd-ca.crt"
		}
	}
	return true
}

func (p *Platform) workloads() []workload {
	cp := p.ControlPlane
	ws := []workload{
		{name: EtcdWorkload, statefulSet: true, replicas: int32(cp.etcdMembers()), mounts: filesOf("etcd"), restart: cp.RestartEtcd}, //nolint:gosec // a handful of members
		{name: APIServerWorkload, replicas: int32(cp.apiServerReplicas()), mounts: apiServerFiles, restart: cp.RestartAPIServer},     //nolint:gosec // a handful of replicas
	}
	if cp.ControllerManager {
		ws = append(ws,
			workload{name: ControllerManagerWorkload, replicas: 1, mounts: filesOf("kcm"),
				restart: func(context.Context) error { cp.StopControllerManager(); return cp.StartControllerManager() },
				// It exits when it loses its leader lease, as when the
				// only API server restarts just after it started.
				crashed: func() bool { return cp.kcm != nil && cp.kcm.exited() }},
			workload{name: SchedulerWorkload, replicas: 1, mounts: filesOf("scheduler"),
				restart: func(context.Context) error { cp.StopScheduler(); return cp.StartScheduler() },
				crashed: func() bool { return cp.scheduler != nil && cp.scheduler.exited() }})
	}
	if cp.Tunnel {
		ws = append(ws, workload{name: TunnelAgentWorkload, replicas: tunnelAgentReplicas, mounts: filesOf("konnectivity-agent"),
			restart: cp.RestartTunnelAgents})
	}
	if cp.MetricsServer {
		ws = append(ws, workload{name: MetricsServerWorkload, replicas: 1, mounts: filesOf("metrics-server"),
			restart: func(ctx context.Context) error {
				c, err := p.managedAdmin(ctx)
				if err != nil {
					return err
				}
				return cp.StartMetricsServer(ctx, c)
			}})
	}
	return ws
}

// managedAdmin returns a client of the managed cluster on Carousel's current
// admin credential.
func (p *Platform) managedAdmin(ctx context.Context) (client.Client, error) {
	cfg, err := RESTConfig(ctx, p.Client, p.Cluster, credentials.CertAdmin)
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme.New()})
}

// CreateWorkloads creates the workloads, reported as rolled out.
func (p *Platform) CreateWorkloads(ctx context.Context) error {
	for _, w := range p.workloads() {
		spec := p.podTemplate(w.name, w.mounts)
		labels := map[string]string{v1alpha1.LabelCluster: p.Cluster.Name}
		selector := &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}}
		var obj client.Object
		if w.statefulSet {
			obj = &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: p.Cluster.Namespace, Name: w.name, Labels: labels},
				Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(w.replicas), Selector: selector, Template: spec}}
		} else {
			// Rolled as maxUnavailable 0 does (see the restart functions).
			strategy := appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1))}}
			obj = &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: p.Cluster.Namespace, Name: w.name, Labels: labels},
				Spec: appsv1.DeploymentSpec{Replicas: ptr.To(w.replicas), Selector: selector, Template: spec, Strategy: strategy}}
		}
		if err := p.Client.Create(ctx, obj); err != nil {
			return err
		}
	}
	_, err := p.rollout(ctx, false)
	return err
}

func (p *Platform) podTemplate(name string, mounts func(credentialFile) bool) corev1.PodTemplateSpec {
	t := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: name}}},
	}
	seen := map[string]bool{}
	for _, f := range credentialFiles(p.Cluster.Name) {
		if !mounts(f) {
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

// Settled reports whether every workload runs the template Carousel last
// stamped with the credentials' checksum.
func (p *Platform) Settled(ctx context.Context) (bool, error) {
	for _, w := range p.workloads() {
		_, template, rolledOut, err := p.get(ctx, w)
		if err != nil {
			return false, err
		}
		if template.Annotations["carousel.dev/credentials-checksum"] == "" || !rolledOut {
			return false, nil
		}
	}
	return true, nil
}

// Sync restarts the workloads whose process exited, then carries out the
// rollouts Carousel asked for since the last call. It returns whether it
// rolled anything.
func (p *Platform) Sync(ctx context.Context) (bool, error) {
	if err := p.restartCrashed(ctx, p.workloads()); err != nil {
		return false, err
	}
	return p.rollout(ctx, true)
}

// restartCrashed restarts each of ws whose process exited by itself.
func (p *Platform) restartCrashed(ctx context.Context, ws []workload) error {
	for _, w := range ws {
		if w.crashed == nil || !w.crashed() {
			continue
		}
		if p.Logf != nil {
			p.Logf("platform: %s exited; restarting it, as the kubelet restarts a container", w.name)
		}
		if err := w.restart(ctx); err != nil {
			return fmt.Errorf("restarting %s, which exited: %w", w.name, err)
		}
	}
	return nil
}

// Start runs run in the background until stop, which waits for it to
// return: a restart it has under way ends before the caller stops the
// control plane, which would otherwise stop processes the restart then
// starts again.
func (p *Platform) Start(interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.run(ctx, interval)
	}()
	return func() {
		cancel()
		<-done
	}
}

// run calls Sync every interval until ctx ends; errors are retried.
func (p *Platform) run(ctx context.Context, interval time.Duration) {
	for {
		_, err := p.Sync(ctx)
		p.setExit(err)
		if err != nil && p.Logf != nil && ctx.Err() == nil {
			p.Logf("platform: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// setExit records whether err, from Sync, says a restarted process exited.
func (p *Platform) setExit(err error) {
	var exit *ExitError
	errors.As(err, &exit)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.exit = exit
}

// lastExit returns how a process the platform restarted in the last Sync
// exited, or nil if none did.
func (p *Platform) lastExit() *ExitError {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// rolloutStages orders the due workloads' rollouts: at once, as their
// controllers roll them, but a single etcd member first and then a single
// API server, each alone: while it restarts, what needs it cannot start.
func rolloutStages(due []workload) [][]workload {
	var stages [][]workload
	rest := due
	for _, name := range []string{EtcdWorkload, APIServerWorkload} {
		if i := slices.IndexFunc(rest, func(w workload) bool { return w.name == name && w.replicas == 1 }); i >= 0 {
			stages = append(stages, []workload{rest[i]})
			rest = slices.Delete(slices.Clone(rest), i, i+1)
		}
	}
	if len(rest) > 0 {
		stages = append(stages, rest)
	}
	return stages
}

// get reads a workload: the object, its pod template, and whether its
// current generation was rolled out.
func (p *Platform) get(ctx context.Context, w workload) (client.Object, *corev1.PodTemplateSpec, bool, error) {
	key := client.ObjectKey{Namespace: p.Cluster.Namespace, Name: w.name}
	if w.statefulSet {
		s := &appsv1.StatefulSet{}
		err := p.Client.Get(ctx, key, s)
		return s, &s.Spec.Template, s.Status.ObservedGeneration == s.Generation, err
	}
	d := &appsv1.Deployment{}
	err := p.Client.Get(ctx, key, d)
	return d, &d.Spec.Template, d.Status.ObservedGeneration == d.Generation, err
}

// rollout restarts (when restart is set) the workloads whose generation is
// ahead of the rolled-out one, and reports them rolled out.
func (p *Platform) rollout(ctx context.Context, restart bool) (bool, error) {
	var due []workload
	objs := map[string]client.Object{}
	for _, w := range p.workloads() {
		obj, _, rolledOut, err := p.get(ctx, w)
		if err != nil {
			return false, err
		}
		if !rolledOut {
			due = append(due, w)
			objs[w.name] = obj
		}
	}
	if len(due) == 0 {
		return false, nil
	}
	if restart {
		if err := p.ControlPlane.WriteCredentials(ctx, p.Client, p.Cluster); err != nil {
			return false, err
		}
		start := time.Now()
		for _, stage := range rolloutStages(due) {
			var wg sync.WaitGroup
			errs := make([]error, len(stage))
			for i, w := range stage {
				if p.Logf != nil {
					p.Logf("platform: rolling %s (generation %d)", w.name, objs[w.name].GetGeneration())
				}
				wg.Go(func() {
					if err := w.restart(ctx); err != nil {
						errs[i] = fmt.Errorf("restarting %s: %w", w.name, err)
					}
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return false, err
			}
		}
		p.mu.Lock()
		p.rollouts = append(p.rollouts, Window{Start: start, End: time.Now()})
		p.mu.Unlock()
	}
	for _, w := range due {
		var err error
		n := w.replicas
		switch obj := objs[w.name].(type) {
		case *appsv1.StatefulSet:
			obj.Status = appsv1.StatefulSetStatus{ObservedGeneration: obj.Generation, Replicas: n, ReadyReplicas: n, UpdatedReplicas: n,
				CurrentReplicas: n, AvailableReplicas: n, CurrentRevision: fmt.Sprint(obj.Generation), UpdateRevision: fmt.Sprint(obj.Generation)}
			err = p.Client.Status().Update(ctx, obj)
		case *appsv1.Deployment:
			obj.Status = appsv1.DeploymentStatus{ObservedGeneration: obj.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
			err = p.Client.Status().Update(ctx, obj)
		}
		// A conflict means Carousel changed the workload meanwhile: the next
		// Sync rolls it again.
		if err != nil && !apierrors.IsConflict(err) {
			return false, err
		}
	}
	return true, nil
}
