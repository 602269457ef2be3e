package cluster

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// objects are the management-cluster objects that belong to one Cluster, as
// read from the cache at the start of a reconcile.
type objects struct {
	// secrets are the cache's own objects, not copies (see loadObjects):
	// read them, never change them or what they hold; writeSecret writes a
	// copy and puts it in their place. A leaf certificate's trust bundle and
	// kubeconfig are digests (cacheSecret) until writeSecret has put the
	// Secret with its whole data in their place.
	secrets      map[string]*corev1.Secret
	configMaps   map[string]*corev1.ConfigMap
	deployments  []appsv1.Deployment
	statefulSets []appsv1.StatefulSet
}

// loadObjects lists everything labelled with the Cluster's name in its
// namespace: through the cache's index by Cluster once SetupWithManager made
// it, by label selector otherwise (an uncached client has no index).
func (r *Reconciler) loadObjects(ctx context.Context, c *v1alpha1.Cluster) (*objects, error) {
	opts := []client.ListOption{client.InNamespace(c.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: c.Name}}
	if r.indexedByCluster {
		opts = append(opts, client.MatchingFields{clusterIndex: c.Name})
	}
	var (
		secrets     corev1.SecretList
		configMaps  corev1.ConfigMapList
		deployments appsv1.DeploymentList
		sets        appsv1.StatefulSetList
	)
	// The Secrets are most of what a reconcile reads (their data, a few
	// certificates and keys each) and it only reads them: it takes the
	// cache's objects as they are instead of a deep copy of each one, every
	// time.
	if err := r.Client.List(ctx, &secrets, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		return nil, fmt.Errorf("listing %T: %w", &secrets, err)
	}
	for _, list := range []client.ObjectList{&configMaps, &deployments, &sets} {
		if err := r.Client.List(ctx, list, opts...); err != nil {
			return nil, fmt.Errorf("listing %T: %w", list, err)
		}
	}
	o := &objects{
		secrets:      make(map[string]*corev1.Secret, len(secrets.Items)),
		configMaps:   make(map[string]*corev1.ConfigMap, len(configMaps.Items)),
		deployments:  deployments.Items,
		statefulSets: sets.Items,
	}
	for i := range secrets.Items {
		o.secrets[secrets.Items[i].Name] = &secrets.Items[i]
	}
	for i := range configMaps.Items {
		o.configMaps[configMaps.Items[i].Name] = &configMaps.Items[i]
	}
	return o, nil
}
