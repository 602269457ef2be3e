package v1alpha1

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// SupportedKubernetesVersions is the range of managed-cluster versions Carousel
// knows the certificate layout of.
const SupportedKubernetesVersions = ">= 1.32.0-0, < 1.38.0-0"

// Bounds and defaults of the durations in a ClusterSpec. The defaults are the
// values the CRD schema fills in.
const (
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	MinCAValidity     = 24 * time.Hour
	MaxCAValidity     = 30 * 365 * 24 * time.Hour

	DefaultLeafValidity = 365 * 24 * time.Hour
	MinLeafValidity     = time.Hour
	MaxLeafValidity     = 2 * 365 * 24 * time.Hour

	DefaultBootstrapTokenTTL = 24 * time.Hour
	MinBootstrapTokenTTL     = 10 * time.Minute
	MaxBootstrapTokenTTL     = 7 * 24 * time.Hour

	DefaultKeyAlgorithm = KeyAlgorithmECDSAP256

	// An InPlace pool's offlineNodeTimeout. The least is above the 50 s after
	// which kube-controller-manager calls a silent node NotReady
	// (--node-monitor-grace-period): a kubelet retrying its Lease through
	// API-server restarts falls 30 s behind the others (measured in the e2e
	// suite, whose control plane restarts four times in a row in Finalizing).
	DefaultOfflineNodeTimeout = 10 * time.Minute
	MinOfflineNodeTimeout     = time.Minute
	MaxOfflineNodeTimeout     = 7 * 24 * time.Hour

	// How long Preparing waits for pods to reload kube-root-ca.crt: up to a
	// minute and a half until the kubelet's jittered pod sync rewrites the
	// projected file, up to five minutes until client-go rereads it
	// (k8s.io/client-go/transport, ClientsAllowCARotation), and a margin.
	DefaultWorkloadTrustReload = 7 * time.Minute
	MaxWorkloadTrustReload     = time.Hour

	// How long service-account key Preparing waits for pods to get tokens of
	// the new key: the kubelet replaces a projected token at 80% of its
	// lifetime (an hour by default) and at the latest after 24 hours.
	DefaultWorkloadTokenRefresh = time.Hour
	MaxWorkloadTokenRefresh     = 25 * time.Hour

	// Automatic CA rotation: the share of a CA's validity used before a
	// rotation starts, the least interval between rotations (each rolls every
	// node twice), and the longest soak in Prepared before completing.
	DefaultAutomaticValidityUsedPercent = 80
	MinAutomaticRotationInterval        = time.Hour
	MaxAutomaticCompleteAfter           = 90 * 24 * time.Hour
)

// DefaultMaxUnavailable is the share of an InPlace pool's nodes that renew
// at a time when maxUnavailable is empty.
var DefaultMaxUnavailable = intstr.FromString("25%")

var versionConstraint = func() *semver.Constraints {
	c, err := semver.NewConstraint(SupportedKubernetesVersions)
	if err != nil {
		panic(err)
	}
	return c
}()

// ValidateCluster validates a Cluster on create: its name and its spec. The
// operation annotation is the rotation's to validate (rotation.ValidateOperation).
func ValidateCluster(c *Cluster) field.ErrorList {
	var allErrs field.ErrorList
	// The name is a label value and the prefix of every object Carousel writes.
	for _, msg := range validation.IsDNS1123Label(c.Name) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("metadata", "name"), c.Name, msg))
	}
	return append(allErrs, ValidateClusterSpec(&c.Spec, field.NewPath("spec"))...)
}

// ValidateClusterUpdate validates a changed spec. An update that leaves the
// spec alone (Carousel removing the annotation, a label change) is not
// refused for a spec that has become invalid since; nor is one that keeps a
// kubernetesVersion this Carousel no longer supports (an upgrade narrowed the
// range) and changes another field, as the API server ratchets a CRD's
// schema validation of a value left unchanged. What a rotation under way
// forbids, and the operation annotation, are the rotation's to validate
// (rotation.ValidateUpdate).
func ValidateClusterUpdate(newC, oldC *Cluster) field.ErrorList {
	if equality.Semantic.DeepEqual(newC.Spec, oldC.Spec) {
		return nil
	}
	p := field.NewPath("spec")
	errs := ValidateClusterSpec(&newC.Spec, p)
	if newC.Spec.KubernetesVersion == oldC.Spec.KubernetesVersion {
		version := p.Child("kubernetesVersion").String()
		errs = slices.DeleteFunc(errs, func(e *field.Error) bool { return e.Field == version })
	}
	return errs
}

// ValidateClusterSpec validates a spec on its own.
func ValidateClusterSpec(spec *ClusterSpec, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateKubernetesVersion(spec.KubernetesVersion, p.Child("kubernetesVersion"))...)
	allErrs = append(allErrs, validateControlPlane(&spec.ControlPlane, p.Child("controlPlane"))...)
	allErrs = append(allErrs, validateCertificates(&spec.Certificates, p.Child("certificates"))...)
	allErrs = append(allErrs, validateWorkers(spec.Workers, p.Child("workers"))...)
	allErrs = append(allErrs, validateKubeletBootstrap(&spec.KubeletBootstrap, p.Child("kubeletBootstrap"))...)
	allErrs = append(allErrs, validateDurationBounds(spec.CARotation.WorkloadTrustReload, 0, MaxWorkloadTrustReload,
		p.Child("caRotation", "workloadTrustReload"))...)
	allErrs = append(allErrs, validateDurationBounds(spec.ServiceAccountKeyRotation.WorkloadTokenRefresh, 0, MaxWorkloadTokenRefresh,
		p.Child("serviceAccountKeyRotation", "workloadTokenRefresh"))...)
	allErrs = append(allErrs, validateAutomaticCARotation(spec, p)...)
	return allErrs
}

// validateAutomaticCARotation checks spec.caRotation.automatic, which acts
// only inside a maintenance window.
func validateAutomaticCARotation(spec *ClusterSpec, p *field.Path) field.ErrorList {
	a := spec.CARotation.Automatic
	if a == nil {
		return nil
	}
	var allErrs field.ErrorList
	ap := p.Child("caRotation", "automatic")
	if spec.Maintenance == nil {
		allErrs = append(allErrs, field.Required(p.Child("maintenance"),
			"spec.caRotation.automatic starts and completes rotations only inside the maintenance window: set spec.maintenance.timeWindow"))
	}
	if v := a.ValidityUsedPercent; v != nil && (*v < 1 || *v > 99) {
		allErrs = append(allErrs, field.Invalid(ap.Child("validityUsedPercent"), *v, "must be between 1 and 99"))
	}
	allErrs = append(allErrs, validateDurationBounds(a.Interval, MinAutomaticRotationInterval, MaxCAValidity, ap.Child("interval"))...)
	return append(allErrs, validateDurationBounds(a.CompleteAfter, 0, MaxAutomaticCompleteAfter, ap.Child("completeAfter"))...)
}

func validateKubernetesVersion(v string, p *field.Path) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(p, "the managed cluster's Kubernetes version, for example 1.36.3")}
	}
	version, err := semver.NewVersion(v)
	if err != nil {
		return field.ErrorList{field.Invalid(p, v, "not a semantic version: "+err.Error())}
	}
	if !versionConstraint.Check(version) {
		return field.ErrorList{field.Invalid(p, v, "unsupported Kubernetes version; supported: "+SupportedKubernetesVersions)}
	}
	return nil
}

func validateControlPlane(cp *ControlPlaneSpec, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if cp.Endpoint != "" {
		if msg := EndpointProblem(cp.Endpoint); msg != "" {
			allErrs = append(allErrs, field.Invalid(p.Child("endpoint"), cp.Endpoint, msg))
		}
	}
	seen := make(map[string]bool, len(cp.ExtraSANs))
	for i, san := range cp.ExtraSANs {
		sp := p.Child("extraSANs").Index(i)
		switch {
		case seen[san]:
			allErrs = append(allErrs, field.Duplicate(sp, san))
		case net.ParseIP(san) != nil:
		case strings.HasPrefix(san, "*."):
			for _, msg := range validation.IsWildcardDNS1123Subdomain(san) {
				allErrs = append(allErrs, field.Invalid(sp, san, msg))
			}
		default:
			for _, msg := range validation.IsDNS1123Subdomain(san) {
				allErrs = append(allErrs, field.Invalid(sp, san, "neither an IP address nor a DNS name: "+msg))
			}
		}
		seen[san] = true
	}
	return allErrs
}

// EndpointProblem says what is wrong with an API server endpoint, or "".
func EndpointProblem(endpoint string) string {
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		return "not a URL: " + err.Error()
	case u.Scheme != "https":
		return "must be an https URL, for example https://10.0.0.1:6443"
	case u.Hostname() == "":
		return "must name a host"
	case u.User != nil:
		return "must not carry user information"
	case u.RawQuery != "" || u.Fragment != "":
		return "must not have a query or fragment"
	case u.Path != "" && u.Path != "/":
		return "must not have a path"
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "port must be between 1 and 65535"
		}
	}
	return ""
}

// KeyAlgorithms lists every key algorithm a spec may name.
func KeyAlgorithms() []KeyAlgorithm {
	return []KeyAlgorithm{KeyAlgorithmECDSAP256, KeyAlgorithmECDSAP384, KeyAlgorithmRSA2048, KeyAlgorithmRSA3072, KeyAlgorithmRSA4096}
}

func validateCertificates(cs *CertificateSettings, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if cs.KeyAlgorithm != "" && !oneOf(cs.KeyAlgorithm, KeyAlgorithms()) {
		allErrs = append(allErrs, field.NotSupported(p.Child("keyAlgorithm"), cs.KeyAlgorithm, KeyAlgorithms()))
	}
	caErrs := validateDurationBounds(cs.CAValidity, MinCAValidity, MaxCAValidity, p.Child("caValidity"))
	leafErrs := validateDurationBounds(cs.LeafValidity, MinLeafValidity, MaxLeafValidity, p.Child("leafValidity"))
	allErrs = append(append(allErrs, caErrs...), leafErrs...)
	if len(caErrs) == 0 && len(leafErrs) == 0 && cs.CAValidityOrDefault() <= cs.LeafValidityOrDefault() {
		allErrs = append(allErrs, field.Invalid(p.Child("leafValidity"), cs.LeafValidityOrDefault().String(),
			fmt.Sprintf("must be shorter than the CA validity (%s)", cs.CAValidityOrDefault())))
	}
	return allErrs
}

func validateWorkers(pools []WorkerPool, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	strategies := []WorkerRolloutStrategy{RolloutInPlace, RolloutReplace, RolloutManual}
	seen := make(map[string]bool, len(pools))
	for i, pool := range pools {
		pp := p.Index(i)
		for _, msg := range validation.IsDNS1123Label(pool.Name) {
			allErrs = append(allErrs, field.Invalid(pp.Child("name"), pool.Name, msg))
		}
		if seen[pool.Name] {
			allErrs = append(allErrs, field.Duplicate(pp.Child("name"), pool.Name))
		}
		seen[pool.Name] = true
		if pool.RolloutStrategy != "" && !oneOf(pool.RolloutStrategy, strategies) {
			allErrs = append(allErrs, field.NotSupported(pp.Child("rolloutStrategy"), pool.RolloutStrategy, strategies))
		}
		md := pp.Child("machineDeployment")
		switch {
		case pool.RolloutStrategy == RolloutReplace && pool.MachineDeployment == "":
			allErrs = append(allErrs, field.Required(md, "the Replace strategy rolls a Cluster API MachineDeployment; name it"))
		case pool.RolloutStrategy != RolloutReplace && pool.MachineDeployment != "":
			allErrs = append(allErrs, field.Forbidden(md, "only the Replace strategy rolls a MachineDeployment"))
		case pool.MachineDeployment != "":
			for _, msg := range validation.IsDNS1123Subdomain(pool.MachineDeployment) {
				allErrs = append(allErrs, field.Invalid(md, pool.MachineDeployment, msg))
			}
		}
		allErrs = append(allErrs, validateInPlaceSettings(pool, pp)...)
	}
	return allErrs
}

// validateInPlaceSettings checks the fields only the InPlace strategy uses.
func validateInPlaceSettings(pool WorkerPool, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	inPlace := pool.RollsInPlace()
	if mu := pool.MaxUnavailable; mu != nil {
		if !inPlace {
			allErrs = append(allErrs, field.Forbidden(p.Child("maxUnavailable"), "only the InPlace strategy renews nodes a few at a time"))
		} else {
			allErrs = append(allErrs, validateMaxUnavailable(*mu, p.Child("maxUnavailable"))...)
		}
	}
	if pool.OfflineNodeTimeout != nil {
		if !inPlace {
			allErrs = append(allErrs, field.Forbidden(p.Child("offlineNodeTimeout"), "only the InPlace strategy waits for nodes to renew"))
		} else {
			allErrs = append(allErrs, validateDurationBounds(pool.OfflineNodeTimeout, MinOfflineNodeTimeout, MaxOfflineNodeTimeout, p.Child("offlineNodeTimeout"))...)
		}
	}
	return allErrs
}

// validateMaxUnavailable wants a number of at least 1 or a percentage
// between 1% and 100%.
func validateMaxUnavailable(v intstr.IntOrString, p *field.Path) field.ErrorList {
	return validateCountOrPercent(v, 1, p, "nodes")
}

// validateCountOrPercent wants a number of at least least, or a percentage
// between least% and 100%, of what.
func validateCountOrPercent(v intstr.IntOrString, least int, p *field.Path, what string) field.ErrorList {
	if v.Type == intstr.Int {
		if int(v.IntVal) < least {
			return field.ErrorList{field.Invalid(p, v.IntVal, fmt.Sprintf("must be at least %d", least))}
		}
		return nil
	}
	digits, ok := strings.CutSuffix(v.StrVal, "%")
	percent, err := strconv.Atoi(digits)
	if !ok || err != nil || strconv.Itoa(percent) != digits || percent < least || percent > 100 {
		return field.ErrorList{field.Invalid(p, v.StrVal, fmt.Sprintf("must be a number of %s (at least %d) or a percentage between %d%% and 100%%", what, least, least))}
	}
	return nil
}

func validateKubeletBootstrap(kb *KubeletBootstrapSpec, p *field.Path) field.ErrorList {
	allErrs := validateDurationBounds(kb.TokenTTL, MinBootstrapTokenTTL, MaxBootstrapTokenTTL, p.Child("tokenTTL"))
	modes := []ApprovalMode{ApprovalAuto, ApprovalManual}
	ap := p.Child("csrApproval")
	if m := kb.CSRApproval.Client; m != "" && !oneOf(m, modes) {
		allErrs = append(allErrs, field.NotSupported(ap.Child("client"), m, modes))
	}
	if m := kb.CSRApproval.Serving; m != "" && !oneOf(m, modes) {
		allErrs = append(allErrs, field.NotSupported(ap.Child("serving"), m, modes))
	}
	return allErrs
}

func validateDurationBounds(d *metav1.Duration, minimum, maximum time.Duration, p *field.Path) field.ErrorList {
	if d != nil && (d.Duration < minimum || d.Duration > maximum) {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), fmt.Sprintf("must be between %s and %s", minimum, maximum))}
	}
	return nil
}

func oneOf[T comparable](v T, allowed []T) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}
