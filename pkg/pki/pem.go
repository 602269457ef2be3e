package pki

import "encoding/base64"

// appendPEM appends to dst the PEM block of type typ that holds der, as
// encoding/pem writes a block without headers: its base64 in lines of 64
// characters between a BEGIN and an END line. encoding/pem allocates a
// base64 encoder of over a kilobyte for each block and grows its buffer line
// by line; the operator encodes every certificate and bundle of a Cluster on
// each reconcile. TestAppendPEM holds both to the same bytes.
func appendPEM(dst []byte, typ string, der []byte) []byte {
	dst = append(append(append(dst, "-----BEGIN "...), typ...), "-----\n"...)
	for len(der) > 0 {
		line := der[:min(len(der), 48)] // 48 bytes make 64 characters
		dst = append(base64.StdEncoding.AppendEncode(dst, line), '\n')
		der = der[len(line):]
	}
	return append(append(append(dst, "-----END "...), typ...), "-----\n"...)
}

// pemSize is the length of the PEM block appendPEM makes of n bytes.
func pemSize(typ string, n int) int {
	lines := (n + 47) / 48
	return len("-----BEGIN -----\n-----END -----\n") + 2*len(typ) + base64.StdEncoding.EncodedLen(n) + lines
}
