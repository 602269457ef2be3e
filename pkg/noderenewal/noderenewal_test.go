package noderenewal

import (
	"crypto"
	"crypto/x509"
	"maps"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/pki"
)

var started = time.Date(2026, 11, 23, 9, 30, 0, 0, time.UTC)

func TestRequestRoundTrip(t *testing.T) {
	at := metav1.NewTime(started)
	req := RequestFor(&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, LastInitiationTime: &at})
	if got := req.String(); got != "2026-11-23T09:30:00Z/Preparing" {
		t.Fatalf("String = %q", got)
	}
	parsed, err := ParseRequest(req.String())
	if err != nil || parsed != req {
		t.Fatalf("ParseRequest(%q) = %+v, %v; want %+v", req, parsed, err, req)
	}
}

func TestAnAbortAsksTwice(t *testing.T) {
	at, back := metav1.NewTime(started), metav1.NewTime(started.Add(time.Hour))
	first := RequestFor(&v1alpha1.CARotation{Phase: v1alpha1.RotationAborting, LastInitiationTime: &at})
	second := RequestFor(&v1alpha1.CARotation{Phase: v1alpha1.RotationAborting, LastInitiationTime: &at, AbortRolledBackTime: &back})
	if first.String() != "2026-11-23T09:30:00Z/Aborting" || second.String() != "2026-11-23T10:30:00Z/Aborting" {
		t.Fatalf("requests %q and %q: want the rotation's start, then the time the pools were back", first, second)
	}
	for _, req := range []Request{first, second} {
		if parsed, err := ParseRequest(req.String()); err != nil || parsed != req {
			t.Fatalf("ParseRequest(%q) = %+v, %v", req, parsed, err)
		}
	}
}

func TestParseRequestRefuses(t *testing.T) {
	for _, value := range []string{
		"", "Preparing", "2026-11-23T09:30:00Z", "2026-11-23T09:30:00Z/", "yesterday/Preparing",
		"2026-11-23T09:30:00Z/Prepared", "2026-11-23T09:30:00Z/Completed", "2026-11-23T10:30:00+01:00/Preparing",
	} {
		if r, err := ParseRequest(value); err == nil {
			t.Errorf("ParseRequest(%q) = %+v, want an error", value, r)
		}
	}
}

func TestReportMatchesWhatCarouselExpects(t *testing.T) {
	ca, err := pki.NewCA(pki.CATemplate{CommonName: "client-ca", Validity: time.Hour}, mustKey(t), started)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA(pki.CATemplate{CommonName: "old-client-ca", Validity: time.Hour}, mustKey(t), started)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(ca *pki.KeyPair) *x509.Certificate {
		kp, err := ca.IssueKeyPair(pki.LeafTemplate{CommonName: "system:node:a", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Hour},
			pki.ECDSAP256, started)
		if err != nil {
			t.Fatal(err)
		}
		return kp.Cert
	}
	kubeletCA, err := pki.NewCA(pki.CATemplate{CommonName: "kubelet-ca", Validity: time.Hour}, mustKey(t), started)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Initiated: started, Phase: v1alpha1.RotationPreparing}
	trust := Trust{Cluster: []byte("cluster bundle"), Kubelet: []byte("kubelet bundle")}
	want := Expected(req, ca.Cert, kubeletCA.Cert, trust)
	if got := ReportOf(req, leaf(ca), leaf(kubeletCA), trust); got != want {
		t.Fatalf("a node renewed from the expected CAs reports %+v, Carousel expects %+v", got, want)
	}
	if got := ReportOf(req, leaf(ca), nil, trust); Assess(answered(got), want) != Done {
		t.Error("Carousel does not take the answer of a node without a serving certificate (stand-in mode) as done")
	}
	for name, got := range map[string]Report{
		"a node on another CA":                    ReportOf(req, leaf(other), leaf(kubeletCA), trust),
		"a node serving from another kubelet CA":  ReportOf(req, leaf(ca), leaf(other), trust),
		"a node with another cluster bundle":      ReportOf(req, leaf(ca), leaf(kubeletCA), Trust{Cluster: []byte("old"), Kubelet: trust.Kubelet}),
		"a node with another kubelet bundle":      ReportOf(req, leaf(ca), leaf(kubeletCA), Trust{Cluster: trust.Cluster, Kubelet: []byte("old")}),
		"a node with the bundles swapped":         ReportOf(req, leaf(ca), leaf(kubeletCA), Trust{Cluster: trust.Kubelet, Kubelet: trust.Cluster}),
		"a node that renewed for another request": ReportOf(Request{Initiated: started, Phase: v1alpha1.RotationFinalizing}, leaf(ca), leaf(kubeletCA), trust),
	} {
		if got == want {
			t.Errorf("%s reports what Carousel expects", name)
		}
		if Assess(answered(got), want) == Done {
			t.Errorf("Carousel takes the answer of %s as done", name)
		}
	}
	if Assess(answered(want), want) != Done {
		t.Error("Carousel does not take the expected answer as done")
	}

	// A node brought in line unasked (a re-bootstrap) reports what it uses
	// and answers no request: one pending stays pending.
	unasked := ReportOf(Request{}, leaf(ca), leaf(kubeletCA), trust).Annotations()
	if _, ok := unasked[v1alpha1.AnnotationCredentialsRenewed]; ok || unasked[v1alpha1.AnnotationTrustBundle] != want.Bundle ||
		unasked[v1alpha1.AnnotationClientCertificateIssuer] != want.Issuer {
		t.Errorf("a report without a request has the annotations %v", unasked)
	}
	asked := map[string]string{v1alpha1.AnnotationRenewCredentials: req.String()}
	maps.Copy(asked, unasked)
	if got, ok := Pending(asked); !ok || got != req {
		t.Errorf("a request is no longer pending once the node reports unasked: Pending = %+v, %v", got, ok)
	}
	if a := Assess(asked, want); a != Wait {
		t.Errorf("Carousel does %s about a node that reported unasked while asked, want Wait", a)
	}
}

func TestAssessAndPending(t *testing.T) {
	req := Request{Initiated: started, Phase: v1alpha1.RotationPreparing}
	earlier := Request{Initiated: started.Add(-24 * time.Hour), Phase: v1alpha1.RotationFinalizing}
	want := Report{Request: req, Issuer: "aa", Bundle: "bb", KubeletBundle: "cc"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	withoutKubeletBundle := answered(want)
	delete(withoutKubeletBundle, v1alpha1.AnnotationKubeletTrustBundle)
	tests := []struct {
		name        string
		annotations map[string]string
		want        Action
		pending     bool // the node agent acts on it
	}{
		{"never asked", nil, Ask, false},
		{"asked for an earlier phase and answered", answered(Report{Request: earlier, Issuer: "aa", Bundle: "bb", KubeletBundle: "cc"}), Ask, false},
		{"asked, not answered", with(v1alpha1.AnnotationRenewCredentials, req.String()), Wait, true},
		{"answered as expected", answered(want), Done, false},
		{"answered from another CA", answered(Report{Request: req, Issuer: "old", Bundle: "bb", KubeletBundle: "cc"}), AskAgain, false},
		{"answered with another bundle", answered(Report{Request: req, Issuer: "aa", Bundle: "old", KubeletBundle: "cc"}), AskAgain, false},
		{"answered with another kubelet bundle", answered(Report{Request: req, Issuer: "aa", Bundle: "bb", KubeletBundle: "old"}), AskAgain, false},
		{"answered without the kubelet bundle (an older agent)", withoutKubeletBundle, AskAgain, false},
		{"answer removed to ask again", with(v1alpha1.AnnotationRenewCredentials, req.String(), v1alpha1.AnnotationClientCertificateIssuer, "old"), Wait, true},
		{"a request that does not parse", with(v1alpha1.AnnotationRenewCredentials, "now/Preparing"), Ask, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Assess(tt.annotations, want); got != tt.want {
				t.Errorf("Assess = %s, want %s", got, tt.want)
			}
			got, pending := Pending(tt.annotations)
			if pending != tt.pending || (pending && got != req) {
				t.Errorf("Pending = %+v, %v; want %v", got, pending, tt.pending)
			}
			// Carousel's side of the action leaves the node asked, not answered.
			after := Annotate(copyMap(tt.annotations), tt.want, req)
			if tt.want == Ask || tt.want == AskAgain {
				if got, pending := Pending(after); !pending || got != req || Assess(after, want) != Wait {
					t.Errorf("after %s: Pending = %+v, %v; Assess = %s", tt.want, got, pending, Assess(after, want))
				}
			}
		})
	}
}

// FuzzParseRequest: ParseRequest never panics, and what it accepts formats
// back to exactly the value it parsed (so both ends compare the same string)
// and names a phase that rolls workers (an abort rolls them back).
func FuzzParseRequest(f *testing.F) {
	for _, seed := range []string{"2026-11-23T09:30:00Z/Preparing", "2026-11-23T09:30:00Z/Finalizing", "2026-11-23T09:30:00Z/Aborting",
		"2026-11-23T09:30:00.5Z/Preparing",
		"2026-11-23T10:30:00+01:00/Preparing", "/", "x/Preparing", "2026-11-23T09:30:00Z/Preparing/x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		req, err := ParseRequest(value)
		if err != nil {
			return
		}
		if req.String() != value {
			t.Fatalf("ParseRequest(%q) formats back as %q", value, req.String())
		}
		if !slices.Contains([]v1alpha1.CARotationPhase{v1alpha1.RotationPreparing, v1alpha1.RotationFinalizing, v1alpha1.RotationAborting}, req.Phase) {
			t.Fatalf("ParseRequest(%q) accepted phase %q", value, req.Phase)
		}
		annotations := map[string]string{v1alpha1.AnnotationRenewCredentials: value}
		if got, ok := Pending(annotations); !ok || got != req {
			t.Fatalf("Pending(%q) = %+v, %v", value, got, ok)
		}
	})
}

// answered is the annotations of a node asked for r's request that answered r.
func answered(r Report) map[string]string {
	m := r.Annotations()
	m[v1alpha1.AnnotationRenewCredentials] = r.Request.String()
	return m
}

func mustKey(t *testing.T) crypto.Signer {
	t.Helper()
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
