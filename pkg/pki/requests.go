package pki

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// EncodeCertificateRequest encodes a DER PKCS #10 request as PEM.
func EncodeCertificateRequest(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemTypeCertificateRequest, Bytes: der})
}

// ParseCertificateRequest parses the first PEM block of data, which must be a
// certificate request. It does not check the request's signature.
func ParseCertificateRequest(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block found where a certificate request was expected")
	}
	if block.Type != pemTypeCertificateRequest {
		return nil, fmt.Errorf("unexpected PEM block %q where a certificate request was expected", block.Type)
	}
	return x509.ParseCertificateRequest(block.Bytes)
}
