// Command realcp measures what a proxy adds to a request on the real control plane: one
// keep-alive client per destination, Go's own HTTP/2 over TLS (the transport client-go and
// kubectl use) or, with -proto h1, Go's HTTP/1.1 keep-alive over TLS (as a client that turns
// HTTP/2 off, or most non-Go clients), sending the same GET in turn straight to kube-apiserver
// and through each proxy in front of it, so all see the same server, the same machine and the
// same moment. The order rotates every round, as whatever goes later is measured slightly
// dearer.
//
// usage: realcp -ca CA -cert CRT -key KEY -straight URL -via NAME=URL [-via NAME=URL ...]
//
//	[-proto h2|h1] [-path P] [-n N] [-repeats R]
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"
)

// vias is the repeated -via NAME=URL flag, in the order given.
type vias []string

func (v *vias) String() string     { return strings.Join(*v, ",") }
func (v *vias) Set(s string) error { *v = append(*v, s); return nil }

func main() {
	ca := flag.String("ca", "", "CA of both serving certificates")
	cert := flag.String("cert", "", "client certificate")
	key := flag.String("key", "", "client key")
	straight := flag.String("straight", "", "kube-apiserver's URL")
	var via vias
	flag.Var(&via, "via", "NAME=URL of a proxy in front of it (repeatable)")
	path := flag.String("path", "/api/v1/namespaces/default", "the GET measured")
	n := flag.Int("n", 2000, "rounds per repeat (one request each way per round)")
	repeats := flag.Int("repeats", 3, "repeats")
	proto := flag.String("proto", "h2", "the client's protocol: h2 (HTTP/2) or h1 (HTTP/1.1 keep-alive)")
	flag.Parse()
	if *ca == "" || *cert == "" || *key == "" || *straight == "" || len(via) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	wantMajor, protoName := 2, "HTTP/2"
	switch *proto {
	case "h2":
	case "h1":
		wantMajor, protoName = 1, "HTTP/1.1"
	default:
		fail(fmt.Errorf("-proto %q: want h2 or h1", *proto))
	}
	pem, err := os.ReadFile(*ca)
	fail(err)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		fail(fmt.Errorf("-ca %s: no certificate", *ca))
	}
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	fail(err)
	client := func() *http.Client {
		tlsConfig := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}
		transport := &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true}
		if wantMajor == 1 {
			// net/http's documented way to turn HTTP/2 off: a non-nil, empty TLSNextProto, and
			// ALPN offering http/1.1 only.
			tlsConfig.NextProtos = []string{"http/1.1"}
			transport.ForceAttemptHTTP2 = false
			transport.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		return &http.Client{Timeout: 10 * time.Second, Transport: transport}
	}
	// One connection each, as kubectl holds one to its server: index 0 is the server itself.
	names, bases := []string{"straight"}, []string{*straight}
	for _, v := range via {
		name, base, ok := strings.Cut(v, "=")
		if !ok {
			fail(fmt.Errorf("-via %q: want NAME=URL", v))
		}
		names, bases = append(names, name), append(bases, base)
	}
	clients := make([]*http.Client, len(bases))
	for i := range clients {
		clients[i] = client()
	}
	get := func(i int) time.Duration {
		t0 := time.Now()
		resp, err := clients[i].Get(bases[i] + *path)
		fail(err)
		_, err = io.Copy(io.Discard, resp.Body)
		fail(err)
		resp.Body.Close()
		d := time.Since(t0)
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != wantMajor {
			fail(fmt.Errorf("GET %s%s: %s over %s", bases[i], *path, resp.Status, resp.Proto))
		}
		return d
	}
	for r := 0; r < 200; r++ {
		for i := range clients {
			get(i)
		}
	}
	fmt.Printf("| client | repeat | requests each | through | straight p50 | through p50 | added p50 | straight p90 | through p90 | added p90 | straight p99 | through p99 | added p99 |\n")
	fmt.Printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for r := 1; r <= *repeats; r++ {
		took := make([][]time.Duration, len(clients))
		for round := 0; round < *n; round++ {
			for k := range clients {
				i := (round + k) % len(clients)
				took[i] = append(took[i], get(i))
			}
		}
		qa := quantiles(took[0])
		for i := 1; i < len(clients); i++ {
			row := fmt.Sprintf("| %s | %d | %d | %s |", protoName, r, *n, names[i])
			qb := quantiles(took[i])
			for q := range qa {
				row += fmt.Sprintf(" %s | %s | %+.3f ms |", ms(qa[q]), ms(qb[q]), float64(qb[q]-qa[q])/1e6)
			}
			fmt.Println(row)
		}
	}
}

func quantiles(d []time.Duration) [3]time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(q float64) time.Duration { return d[int(q*float64(len(d)-1))] }
	return [3]time.Duration{at(0.50), at(0.90), at(0.99)}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/1e6) }

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "realcp:", err)
		os.Exit(1)
	}
}
