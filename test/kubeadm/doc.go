// Package kubeadm proves that what Carousel publishes in a managed cluster
// works with a client nobody in this project wrote: kubeadm's own token
// discovery (k8s.io/kubernetes/cmd/kubeadm/app/discovery/token), run as a
// library against a real kube-apiserver. It is a module of its own because
// k8s.io/kubernetes cannot be required by the main module cleanly; `make
// test-kubeadm` runs it.
package kubeadm
