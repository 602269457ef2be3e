package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// consumer is a Deployment or StatefulSet that mounts the Cluster's credentials.
type consumer struct {
	obj       client.Object
	template  *corev1.PodTemplateSpec
	rolledOut bool
}

func consumersOf(objs *objects) []consumer {
	var out []consumer
	for i := range objs.deployments {
		d := &objs.deployments[i]
		replicas := ptr.Deref(d.Spec.Replicas, 1)
		out = append(out, consumer{obj: d, template: &d.Spec.Template, rolledOut: d.Status.ObservedGeneration >= d.Generation &&
			d.Status.UpdatedReplicas == replicas && d.Status.Replicas == replicas && d.Status.AvailableReplicas == replicas})
	}
	for i := range objs.statefulSets {
		s := &objs.statefulSets[i]
		replicas := ptr.Deref(s.Spec.Replicas, 1)
		// With OnDelete, the controller never moves currentRevision on: the
		// update is done once every Pod, deleted by the user, is of it.
		onDelete := s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType
		out = append(out, consumer{obj: s, template: &s.Spec.Template, rolledOut: s.Status.ObservedGeneration >= s.Generation &&
			(s.Status.UpdateRevision == s.Status.CurrentRevision || onDelete) && s.Status.UpdatedReplicas == replicas && s.Status.ReadyReplicas == replicas})
	}
	return out
}

// trustChecksum digests every trust bundle of the Cluster.
func trustChecksum(trust bundles) string {
	h := sha256.New()
	for _, role := range v1alpha1.CARoles() {
		fmt.Fprintf(h, "%s\x00%s\x00", role, trust[role])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// trustEstablished reports whether every consumer has rolled out a template
// that carries the current trust bundles.
func trustEstablished(consumers []consumer, trust string) bool {
	for _, c := range consumers {
		if c.template.Annotations[v1alpha1.AnnotationTrustChecksum] != trust || !c.rolledOut {
			return false
		}
	}
	return true
}

// rollConsumers stamps every consumer's pod template with the checksums of
// the credentials it references, so that a change rolls it, and reports
// whether every consumer has rolled out its current template.
func (r *Reconciler) rollConsumers(ctx context.Context, objs *objects, consumers []consumer, trust string) (bool, error) {
	all := true
	for _, c := range consumers {
		want := map[string]string{
			v1alpha1.AnnotationCredentialsChecksum: credentialsChecksum(&c.template.Spec, objs),
			v1alpha1.AnnotationTrustChecksum:       trust,
		}
		if !hasMeta(c.template.Annotations, want) {
			if err := r.referencesCurrent(ctx, &c.template.Spec, objs, c.obj.GetNamespace()); err != nil {
				return false, fmt.Errorf("rolling %s: %w", c.obj.GetName(), err)
			}
			base := c.obj.DeepCopyObject().(client.Object)
			c.template.Annotations = mergeMeta(c.template.Annotations, want)
			if err := r.Client.Patch(ctx, c.obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
				return false, fmt.Errorf("rolling %s: %w", c.obj.GetName(), err)
			}
			all = false
			continue
		}
		all = all && c.rolledOut
	}
	return all, nil
}

// referencesCurrent checks, before a consumer is rolled to a new checksum,
// that the Secrets and ConfigMaps of Carousel's it references are as the API
// server has them (their resourceVersion, read past the cache): the checksum
// of one the cache shows from before a write would roll the consumer back
// to it, and forth again once the cache caught up. errStaleCache otherwise.
// A consumer is rolled a few times a rotation: these reads are as rare.
func (r *Reconciler) referencesCurrent(ctx context.Context, spec *corev1.PodSpec, objs *objects, namespace string) error {
	secrets, configMaps := references(spec)
	check := func(kind schema.GroupVersionKind, name, cached string) error {
		m, err := r.readMetadata(ctx, kind, client.ObjectKey{Namespace: namespace, Name: name})
		if apierrors.IsNotFound(err) || err == nil && m.ResourceVersion != cached {
			return fmt.Errorf("%s %s: %w", kind.Kind, name, errStaleCache)
		}
		return err
	}
	for _, name := range secrets {
		if s, ok := objs.secrets[name]; ok {
			if err := check(secretKind, name, s.ResourceVersion); err != nil {
				return err
			}
		}
	}
	for _, name := range configMaps {
		if cm, ok := objs.configMaps[name]; ok {
			if err := check(configMapKind, name, cm.ResourceVersion); err != nil {
				return err
			}
		}
	}
	return nil
}

// credentialsChecksum digests the Carousel-managed Secrets and ConfigMaps a
// pod spec references, by name and content.
func credentialsChecksum(spec *corev1.PodSpec, objs *objects) string {
	secrets, configMaps := references(spec)
	h := sha256.New()
	for _, name := range secrets {
		if s, ok := objs.secrets[name]; ok {
			fmt.Fprintf(h, "secret\x00%s\x00", name)
			for _, k := range sortedKeys(s.Data) {
				fmt.Fprintf(h, "%s\x00%s\x00", k, s.Data[k])
			}
		}
	}
	for _, name := range configMaps {
		if cm, ok := objs.configMaps[name]; ok {
			fmt.Fprintf(h, "configmap\x00%s\x00", name)
			for _, k := range sortedKeys(cm.Data) {
				fmt.Fprintf(h, "%s\x00%s\x00", k, cm.Data[k])
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// references lists, sorted and without duplicates, the Secrets and
// ConfigMaps a pod spec mounts or reads environment variables from.
func references(spec *corev1.PodSpec) (secrets, configMaps []string) {
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			secrets = append(secrets, v.Secret.SecretName)
		}
		if v.ConfigMap != nil {
			configMaps = append(configMaps, v.ConfigMap.Name)
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					secrets = append(secrets, src.Secret.Name)
				}
				if src.ConfigMap != nil {
					configMaps = append(configMaps, src.ConfigMap.Name)
				}
			}
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, from := range c.EnvFrom {
			if from.SecretRef != nil {
				secrets = append(secrets, from.SecretRef.Name)
			}
			if from.ConfigMapRef != nil {
				configMaps = append(configMaps, from.ConfigMapRef.Name)
			}
		}
		for _, env := range c.Env {
			if env.ValueFrom == nil {
				continue
			}
			if ref := env.ValueFrom.SecretKeyRef; ref != nil {
				secrets = append(secrets, ref.Name)
			}
			if ref := env.ValueFrom.ConfigMapKeyRef; ref != nil {
				configMaps = append(configMaps, ref.Name)
			}
		}
	}
	slices.Sort(secrets)
	slices.Sort(configMaps)
	return slices.Compact(secrets), slices.Compact(configMaps)
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
