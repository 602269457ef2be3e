package nodeagent

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// servingCurrentFile is the kubelet's current serving pair in its cert dir,
// a symlink to kubelet-server-<timestamp>.pem (serverTLSBootstrap).
const servingCurrentFile = ServingStore + "-current.pem"

// servingState is how the kubelet's serving certificate stands against a
// kubelet trust bundle.
type servingState int

const (
	// servingAbsent: there is no serving pair.
	servingAbsent servingState = iota
	// servingTrusted: the serving certificate verifies against the bundle.
	servingTrusted
	// servingUntrusted: it does not (or does not parse): clients that trust
	// only the bundle would refuse it.
	servingUntrusted
)

func (s servingState) String() string {
	return [...]string{"absent", "trusted", "untrusted"}[s]
}

// checkServing returns the state of the serving pair at path against the
// PEM bundle at now and, when untrusted, why. err is for a pair or bundle
// that cannot be read, which says nothing about the pair.
func checkServing(path string, bundle []byte, now time.Time) (state servingState, why, err error) {
	roots, err := pki.ParseCertificates(bundle)
	if err != nil {
		return 0, nil, fmt.Errorf("the kubelet bundle: %w", err)
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return servingAbsent, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	kp, err := parsePair(data)
	if err != nil {
		return servingUntrusted, fmt.Errorf("%s: %w", path, err), nil
	}
	if err := verifyServing(kp.Cert, data, roots, now); err != nil {
		return servingUntrusted, err, nil
	}
	return servingTrusted, nil, nil
}

// verifyServing verifies the serving certificate leaf, first in the PEM
// data as the signer sent it (the certificates after it are
// intermediates), against roots at now, for server authentication.
func verifyServing(leaf *x509.Certificate, data []byte, roots []*x509.Certificate, now time.Time) error {
	intermediates := x509.NewCertPool()
	for i, rest := 0, data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if i++; i == 1 {
			continue
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			intermediates.AddCert(c)
		}
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pki.NewBundle(roots...).CertPool(), Intermediates: intermediates,
		CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}
