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
	for _, list := range []client.ObjectList{&secrets, &configMaps, &deployments, &sets} {
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
