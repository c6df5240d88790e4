package redistest

import (
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

// TLSMaterial is the certificate set generated for a TLS deployment. All files
// live in a test temporary directory.
type TLSMaterial struct {
	// CAFile is the PEM CA certificate that signed the server and client certificates.
	CAFile string
	// ServerName is the name the server certificate is valid for (also valid for 127.0.0.1).
	ServerName string
	// ClientCertFile and ClientKeyFile are a PEM client certificate and key signed by the CA.
	ClientCertFile string
	ClientKeyFile  string
	// Config returns a fresh client tls.Config that trusts the CA, presents the
	// client certificate and verifies ServerName.
	Config func() *tls.Config

	serverCertFile string
	serverKeyFile  string
}

// generateTLS writes a CA, a server certificate (127.0.0.1, localhost; usable
// as a client certificate too, because replication and the cluster bus reuse
// it) and a client certificate into dir.
func generateTLS(dir string) (*TLSMaterial, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	leaf := func(cn string, usage []x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey, error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		return der, k, err
	}
	srvDER, srvKey, err := leaf("localhost", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	if err != nil {
		return nil, err
	}
	cliDER, cliKey, err := leaf("redistest client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	if err != nil {
		return nil, err
	}
	m := &TLSMaterial{
		CAFile:         filepath.Join(dir, "ca.crt"),
		ServerName:     "localhost",
		ClientCertFile: filepath.Join(dir, "client.crt"),
		ClientKeyFile:  filepath.Join(dir, "client.key"),
		serverCertFile: filepath.Join(dir, "server.crt"),
		serverKeyFile:  filepath.Join(dir, "server.key"),
	}
	if err := writePEM(m.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	if err := writePEM(m.serverCertFile, "CERTIFICATE", srvDER); err != nil {
		return nil, err
	}
	if err := writeKey(m.serverKeyFile, srvKey); err != nil {
		return nil, err
	}
	if err := writePEM(m.ClientCertFile, "CERTIFICATE", cliDER); err != nil {
		return nil, err
	}
	if err := writeKey(m.ClientKeyFile, cliKey); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	clientPair := tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}
	m.Config = func() *tls.Config {
		return &tls.Config{
			RootCAs:      pool,
			ServerName:   m.ServerName,
			Certificates: []tls.Certificate{clientPair},
			MinVersion:   tls.VersionTLS12,
		}
	}
	return m, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		// crypto/rand never fails on Linux; a constant serial is still a valid certificate.
		return big.NewInt(1)
	}
	return n
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func writeKey(path string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return fmt.Errorf("marshal key: %w", err)
	}
	return writePEM(path, "PRIVATE KEY", der)
}
