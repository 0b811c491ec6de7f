package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// AdminUser and AdminGroup are the identity of the admin client certificate.
// Membership in system:masters bypasses RBAC.
const (
	AdminUser  = "quietpatch-admin"
	AdminGroup = "system:masters"
)

// pki holds the keys and certificates a control plane runs with, all made
// fresh at Start (ECDSA P-256, valid for a year).
type pki struct {
	caPEM         []byte
	servingCert   tls.Certificate // kube-apiserver and fault proxy serving cert
	servingPEM    []byte
	servingKeyPEM []byte
	adminCertPEM  []byte
	adminKeyPEM   []byte
	saKeyPEM      []byte // service-account signing key (private)
	saPubPEM      []byte // its public key
}

// pki file names inside <Dir>/pki.
const (
	caCertFile      = "ca.crt"
	servingCertFile = "apiserver.crt"
	servingKeyFile  = "apiserver.key"
	adminCertFile   = "admin.crt"
	adminKeyFile    = "admin.key"
	saKeyFile       = "sa.key"
	saPubFile       = "sa.pub"
)

func newPKI() (*pki, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "quietpatch-e2e-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caCert, caPEM, err := signCert(caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}

	p := &pki{caPEM: caPEM}
	servingKey, servingKeyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	_, servingPEM, err := signCert(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)},
	}, caCert, &servingKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	p.servingPEM, p.servingKeyPEM = servingPEM, servingKeyPEM
	if p.servingCert, err = tls.X509KeyPair(servingPEM, servingKeyPEM); err != nil {
		return nil, err
	}

	adminKey, adminKeyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	_, adminPEM, err := signCert(&x509.Certificate{
		Subject:     pkix.Name{CommonName: AdminUser, Organization: []string{AdminGroup}},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, caCert, &adminKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	p.adminCertPEM, p.adminKeyPEM = adminPEM, adminKeyPEM

	saKey, saKeyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	p.saKeyPEM = saKeyPEM
	p.saPubPEM = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	return p, nil
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func signCert(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) (*x509.Certificate, []byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: signing certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// write stores the PKI files in dir (private keys mode 0600).
func (p *pki) write(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{caCertFile, p.caPEM, 0o644},
		{servingCertFile, p.servingPEM, 0o644},
		{servingKeyFile, p.servingKeyPEM, 0o600},
		{adminCertFile, p.adminCertPEM, 0o644},
		{adminKeyFile, p.adminKeyPEM, 0o600},
		{saKeyFile, p.saKeyPEM, 0o600},
		{saPubFile, p.saPubPEM, 0o644},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}
