// Package credentials knows every credential of a managed cluster: which
// certificates exist, who signs them, what they contain, the names and labels
// of the Secrets and ConfigMaps that hold them, and how they are encoded.
// It reads and writes nothing itself; the reconciler does.
package credentials

import (
	"crypto/x509"
	"net"
	"net/url"
	"strings"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// RenewalPhase is the phase of a CA rotation in which a certificate moves to
// the new CA.
type RenewalPhase string

const (
	// RenewInPreparing marks a client certificate whose verifiers are rolled to
	// trust both CAs in Preparing; it moves to the new CA once they do.
	RenewInPreparing RenewalPhase = "Preparing"
	// RenewInFinalizing marks a server certificate, or a client certificate whose
	// verifiers (nodes) trust the new CA only after the worker rollout; it
	// moves to the new CA in Finalizing.
	RenewInFinalizing RenewalPhase = "Finalizing"
)

// Certificate describes one leaf certificate of a managed cluster.
type Certificate struct {
	// Name identifies the certificate; it is the suffix of its Secret's name
	// and the value of its carousel.dev/certificate label.
	Name string
	// SignedBy is the role of the CA that signs it.
	SignedBy v1alpha1.CARole
	// PeerTrust is the role whose trust bundle the holder uses to verify its
	// peers; it is written next to the key pair as ca.crt (and into the
	// kubeconfig for kubeconfig credentials).
	PeerTrust    v1alpha1.CARole
	CommonName   string
	Organization []string
	Usages       []x509.ExtKeyUsage
	DNSNames     []string
	IPAddresses  []net.IP
	RenewIn      RenewalPhase
	// Kubeconfig marks a client credential delivered as a kubeconfig too.
	Kubeconfig bool
	// Consumer says who uses the certificate (for the documentation).
	Consumer string
}

// Certificate names.
const (
	CertKubeAPIServer            = "kube-apiserver"
	CertKubeAPIServerEtcdClient  = "kube-apiserver-etcd-client"
	CertKubeAPIServerKubelet     = "kube-apiserver-kubelet-client"
	CertEtcdServer               = "etcd-server"
	CertEtcdPeer                 = "etcd-peer"
	CertFrontProxyClient         = "front-proxy-client"
	CertKubeControllerManager    = "kube-controller-manager"
	CertKubeScheduler            = "kube-scheduler"
	CertMetricsServer            = "metrics-server"
	CertVPNServer                = "vpn-server"
	CertVPNClient                = "vpn-client"
	CertAdmin                    = "admin"
	CertOperator                 = "carousel-operator"
	DefaultServiceIP             = "10.96.0.1"
	inClusterAPIServerServiceDNS = "kubernetes.default.svc"
)

var (
	clientUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	serverUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	// serverClientUsage is for a server that is its own client too: an etcd
	// member dials its peers, and its JSON gateway dials the member's own
	// gRPC server, each time presenting the same pair (as kubeadm's etcd
	// certificates have both usages).
	serverClientUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	loopback          = []net.IP{net.IPv4(127, 0, 0, 1).To4(), net.IPv6loopback}
)

// Certificates returns every leaf certificate the cluster needs, in a fixed order.
func Certificates(c *v1alpha1.Cluster) []Certificate {
	ns := c.Namespace
	apiDNS := []string{
		"localhost", "kube-apiserver", "kube-apiserver." + ns, "kube-apiserver." + ns + ".svc",
		"kubernetes", "kubernetes.default", inClusterAPIServerServiceDNS, inClusterAPIServerServiceDNS + ".cluster.local",
	}
	apiIPs := append(append([]net.IP{}, loopback...), net.ParseIP(DefaultServiceIP).To4())
	apiDNS, apiIPs = addExternalSANs(c, apiDNS, apiIPs)
	// The nodes' VPN clients dial the control plane's address too (a tunnel
	// server shares it with the API server, told apart by port or ALPN, as
	// konnectivity's agent does with --alpn-proto).
	vpnDNS, vpnIPs := addExternalSANs(c, []string{"vpn-server", "vpn-server." + ns, "vpn-server." + ns + ".svc"}, nil)
	etcdDNS := []string{"localhost", "etcd", "etcd." + ns, "etcd." + ns + ".svc"}

	return []Certificate{
		{Name: CertKubeAPIServer, SignedBy: v1alpha1.CARoleCluster, PeerTrust: v1alpha1.CARoleClient,
			CommonName: "kube-apiserver", Usages: serverUsage, DNSNames: apiDNS, IPAddresses: apiIPs,
			RenewIn: RenewInFinalizing, Consumer: "kube-apiserver (--tls-cert-file)"},
		{Name: CertKubeAPIServerEtcdClient, SignedBy: v1alpha1.CARoleEtcd, PeerTrust: v1alpha1.CARoleEtcd,
			CommonName: "kube-apiserver-etcd-client", Usages: clientUsage,
			RenewIn: RenewInPreparing, Consumer: "kube-apiserver (--etcd-certfile)"},
		{Name: CertKubeAPIServerKubelet, SignedBy: v1alpha1.CARoleKubelet, PeerTrust: v1alpha1.CARoleKubelet,
			CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}, Usages: clientUsage,
			RenewIn: RenewInFinalizing, Consumer: "kube-apiserver (--kubelet-client-certificate)"},
		{Name: CertEtcdServer, SignedBy: v1alpha1.CARoleEtcd, PeerTrust: v1alpha1.CARoleEtcd,
			CommonName: "etcd-server", Usages: serverClientUsage, DNSNames: etcdDNS, IPAddresses: loopback,
			RenewIn: RenewInFinalizing, Consumer: "etcd (--cert-file)"},
		{Name: CertEtcdPeer, SignedBy: v1alpha1.CARoleEtcd, PeerTrust: v1alpha1.CARoleEtcd,
			CommonName: "etcd-peer", Usages: serverClientUsage, DNSNames: append(etcdDNS, "*.etcd-peer."+ns+".svc"), IPAddresses: loopback,
			RenewIn: RenewInFinalizing, Consumer: "etcd (--peer-cert-file)"},
		{Name: CertFrontProxyClient, SignedBy: v1alpha1.CARoleFrontProxy, PeerTrust: v1alpha1.CARoleFrontProxy,
			CommonName: "front-proxy-client", Usages: clientUsage,
			RenewIn: RenewInPreparing, Consumer: "kube-apiserver (--proxy-client-cert-file)"},
		{Name: CertKubeControllerManager, SignedBy: v1alpha1.CARoleClient, PeerTrust: v1alpha1.CARoleCluster,
			CommonName: "system:kube-controller-manager", Usages: clientUsage, Kubeconfig: true,
			RenewIn: RenewInPreparing, Consumer: "kube-controller-manager (--kubeconfig)"},
		{Name: CertKubeScheduler, SignedBy: v1alpha1.CARoleClient, PeerTrust: v1alpha1.CARoleCluster,
			CommonName: "system:kube-scheduler", Usages: clientUsage, Kubeconfig: true,
			RenewIn: RenewInPreparing, Consumer: "kube-scheduler (--kubeconfig)"},
		{Name: CertMetricsServer, SignedBy: v1alpha1.CARoleMetricsServer, PeerTrust: v1alpha1.CARoleFrontProxy,
			CommonName: "metrics-server", Usages: serverUsage,
			DNSNames: []string{"metrics-server", "metrics-server.kube-system", "metrics-server.kube-system.svc"},
			RenewIn:  RenewInFinalizing, Consumer: "metrics-server (--tls-cert-file)"},
		{Name: CertVPNServer, SignedBy: v1alpha1.CARoleVPN, PeerTrust: v1alpha1.CARoleVPN,
			CommonName: "vpn-server", Usages: serverUsage, DNSNames: vpnDNS, IPAddresses: vpnIPs,
			RenewIn: RenewInFinalizing, Consumer: "VPN server in the control plane"},
		{Name: CertVPNClient, SignedBy: v1alpha1.CARoleVPN, PeerTrust: v1alpha1.CARoleVPN,
			CommonName: "vpn-client", Usages: clientUsage,
			RenewIn: RenewInPreparing, Consumer: "VPN client on the nodes"},
		{Name: CertAdmin, SignedBy: v1alpha1.CARoleClient, PeerTrust: v1alpha1.CARoleCluster,
			CommonName: "carousel:admin", Organization: []string{"system:masters"}, Usages: clientUsage, Kubeconfig: true,
			RenewIn: RenewInPreparing, Consumer: "cluster administrators"},
		{Name: CertOperator, SignedBy: v1alpha1.CARoleClient, PeerTrust: v1alpha1.CARoleCluster,
			CommonName: "carousel:operator", Organization: []string{"system:masters"}, Usages: clientUsage, Kubeconfig: true,
			RenewIn: RenewInPreparing, Consumer: "Carousel itself (evidence checks, kubelet bootstrap)"},
	}
}

// addExternalSANs adds the names by which clients outside the control plane
// reach it: the endpoint's host and the extra SANs.
func addExternalSANs(c *v1alpha1.Cluster, dns []string, ips []net.IP) ([]string, []net.IP) {
	if host := endpointHost(c.Spec.ControlPlane.Endpoint); host != "" {
		dns, ips = addSAN(dns, ips, host)
	}
	for _, san := range c.Spec.ControlPlane.ExtraSANs {
		dns, ips = addSAN(dns, ips, san)
	}
	return dns, ips
}

// endpointHost returns the host of an endpoint URL, or "".
func endpointHost(endpoint string) string {
	if endpoint == "" {
		return ""
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// addSAN adds a name to the DNS or IP list, unless it is there already.
func addSAN(dns []string, ips []net.IP, san string) ([]string, []net.IP) {
	if ip := net.ParseIP(san); ip != nil {
		for _, have := range ips {
			if have.Equal(ip) {
				return dns, ips
			}
		}
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		return dns, append(ips, ip)
	}
	// A DNS name's case means nothing: the endpoint's host, as written in
	// its URL, and an extra SAN (a DNS-1123 subdomain, lower case) may be
	// the same name. The first stays as written, so that a certificate
	// issued before is not issued again.
	for _, have := range dns {
		if strings.EqualFold(have, san) {
			return dns, ips
		}
	}
	return append(dns, san), ips
}
