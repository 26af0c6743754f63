// Command realcp measures what mvproxy adds to a request on the real control plane: one
// keep-alive client, Go's own HTTP/2 over TLS (the transport client-go and kubectl use),
// alternating the same GET straight to kube-apiserver and through mvproxy in front of it, so
// both see the same server, the same machine and the same moment. The order flips every round,
// as whatever goes second is measured slightly dearer.
//
// usage: realcp -ca CA -cert CRT -key KEY -straight URL -proxied URL [-path P] [-n N] [-repeats R]
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
	"time"
)

func main() {
	ca := flag.String("ca", "", "CA of both serving certificates")
	cert := flag.String("cert", "", "client certificate")
	key := flag.String("key", "", "client key")
	straight := flag.String("straight", "", "kube-apiserver's URL")
	proxied := flag.String("proxied", "", "mvproxy's URL in front of it")
	path := flag.String("path", "/api/v1/namespaces/default", "the GET measured")
	n := flag.Int("n", 2000, "rounds per repeat (one request each way per round)")
	repeats := flag.Int("repeats", 3, "repeats")
	flag.Parse()
	if *ca == "" || *cert == "" || *key == "" || *straight == "" || *proxied == "" {
		flag.Usage()
		os.Exit(2)
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
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}},
			ForceAttemptHTTP2: true,
		}}
	}
	// One connection each, as kubectl holds one to its server.
	direct, through := client(), client()
	get := func(c *http.Client, base string) time.Duration {
		t0 := time.Now()
		resp, err := c.Get(base + *path)
		fail(err)
		_, err = io.Copy(io.Discard, resp.Body)
		fail(err)
		resp.Body.Close()
		d := time.Since(t0)
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			fail(fmt.Errorf("GET %s%s: %s over %s", base, *path, resp.Status, resp.Proto))
		}
		return d
	}
	for i := 0; i < 200; i++ {
		get(direct, *straight)
		get(through, *proxied)
	}
	fmt.Printf("| repeat | requests each | straight p50 | through mvproxy p50 | added p50 | straight p90 | through p90 | added p90 | straight p99 | through p99 | added p99 |\n")
	fmt.Printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for r := 1; r <= *repeats; r++ {
		a := make([]time.Duration, 0, *n)
		b := make([]time.Duration, 0, *n)
		for i := 0; i < *n; i++ {
			if i%2 == 0 {
				a = append(a, get(direct, *straight))
				b = append(b, get(through, *proxied))
			} else {
				b = append(b, get(through, *proxied))
				a = append(a, get(direct, *straight))
			}
		}
		row := fmt.Sprintf("| %d | %d |", r, *n)
		qa, qb := quantiles(a), quantiles(b)
		for q := range qa {
			row += fmt.Sprintf(" %s | %s | %+.3f ms |", ms(qa[q]), ms(qb[q]), float64(qb[q]-qa[q])/1e6)
		}
		fmt.Println(row)
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
