// Command churn posts one AdmissionReview over and over from C callers for
// a while, as kube-apiserver's Go client does, and prints how many calls
// were answered: with -conn new every call opens its own TLS connection
// (what kube-apiserver's HTTP/1.1 client does for most calls once more are
// in flight than it keeps idle), with -conn keep connections are reused,
// with -conn h2 the calls share HTTP/2 connections.
//
//	churn -ca ca.crt -server-name finalizer-guard -review review.json -c 32 -d 10s -conn new
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "https://127.0.0.1:8443/validate", "webhook URL")
	ca := flag.String("ca", "", "CA certificate (PEM) the webhook's certificate chains to")
	serverName := flag.String("server-name", "finalizer-guard", "TLS server name")
	review := flag.String("review", "", "AdmissionReview file")
	callers := flag.Int("c", 32, "concurrent callers")
	duration := flag.Duration("d", 10*time.Second, "how long to call")
	conn := flag.String("conn", "new", "new: a TLS connection per call; keep: HTTP/1.1 keep-alive; h2: HTTP/2")
	flag.Parse()

	body, err := os.ReadFile(*review)
	if err != nil {
		fail(err)
	}
	pem, err := os.ReadFile(*ca)
	if err != nil {
		fail(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		fail(fmt.Errorf("%s: no certificate", *ca))
	}
	config := &tls.Config{RootCAs: roots, ServerName: *serverName}
	transport := &http.Transport{TLSClientConfig: config, MaxIdleConnsPerHost: *callers}
	switch *conn {
	case "new":
		config.NextProtos = []string{"http/1.1"}
		transport.DisableKeepAlives = true
	case "keep":
		config.NextProtos = []string{"http/1.1"}
	case "h2":
		transport.ForceAttemptHTTP2 = true
	default:
		fail(fmt.Errorf("-conn: new, keep or h2, not %q", *conn))
	}
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}

	var answered, failed atomic.Int64
	var firstError atomic.Value
	stop := time.Now().Add(*duration)
	var wg sync.WaitGroup
	for range *callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				resp, err := client.Post(*url, "application/json", bytes.NewReader(body))
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("HTTP %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed.Add(1)
					firstError.CompareAndSwap(nil, err.Error())
					continue
				}
				answered.Add(1)
			}
		}()
	}
	wg.Wait()
	first, _ := firstError.Load().(string)
	fmt.Printf("{\"answered\": %d, \"failed\": %d, \"first_error\": %q, \"seconds\": %.1f}\n",
		answered.Load(), failed.Load(), first, duration.Seconds())
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "churn:", err)
	os.Exit(2)
}
